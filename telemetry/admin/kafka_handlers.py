"""The admin APIs on the Kafka listener: client-metrics configs and client quotas.

Served: DescribeConfigs (32, v1–4) and IncrementalAlterConfigs (44, v0–1) for
CLIENT_METRICS resources (type 16), ListConfigResources (74, v0–1; named
ListClientMetricsResources before KIP-1142), DescribeClientQuotas (48, v0–1)
and AlterClientQuotas (49, v0–1): what ``kafka-configs.sh``,
``kafka-client-metrics.sh`` and kafka-python's admin client send.

Reads answer at once. A change is answered only once the metadata store has
it on disk: the handler returns a pending response, completed from the task
that appends in a worker thread, so the connection keeps its order and the
event loop never waits for an ``fsync``.

Kafka's rules around a change: ALTER_CONFIGS on the cluster (the
:class:`~telemetry.admin.authorizer.Authorizer`), else
CLUSTER_AUTHORIZATION_FAILED (31) for each resource or entity; and, as
KIP-599 does for topic mutations, each resource or entity a change would
touch draws one token from the caller's strict ``controller_mutation_rate``:
in deficit it is refused with THROTTLING_QUOTA_EXCEEDED (89) and the
throttle time is returned (``validate_only`` draws nothing).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

from telemetry.admin.authorizer import (
    CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
    THROTTLED_MESSAGE,
    principal_of,
)
from telemetry.admin.plane import unsupported_resource_message
from telemetry.admin.quota_alter import with_kafka_key_names
from telemetry.errors import ErrorCode, TelemetryError
from telemetry.kafka.connection import CloseConnectionError
from telemetry.kafka.pending import Pending
from telemetry.metastore import CLIENT_METRICS_RESOURCE
from telemetry.wire import UnsupportedVersionError
from telemetry.wire.admin_apis import (
    ADMIN_VERSIONS,
    AdminApiKey,
    decode_admin_request,
    encode_admin_response,
)
from telemetry.wire.config_messages import (
    AlterConfigsResourceResponse,
    ConfigResource,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from telemetry.wire.quota_messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterClientQuotasResult,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from typing import Any

    from telemetry.admin.authorizer import Authorizer
    from telemetry.admin.plane import AdminPlane
    from telemetry.enforcement import ClientEntity, Enforcement
    from telemetry.kafka.connection_state import ConnectionState
    from telemetry.kafka.table import ApiTable
    from telemetry.wire.admin_apis import AdminResponse

_log = logging.getLogger(__name__)

#: The admin keys this module answers, in the order ApiVersions lists them.
SERVED: Final = (
    AdminApiKey.DESCRIBE_CONFIGS,
    AdminApiKey.INCREMENTAL_ALTER_CONFIGS,
    AdminApiKey.DESCRIBE_CLIENT_QUOTAS,
    AdminApiKey.ALTER_CLIENT_QUOTAS,
    AdminApiKey.LIST_CONFIG_RESOURCES,
)
#: ListConfigResources v1's types (KIP-1142): TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP.
_LISTABLE_TYPES: Final = frozenset({2, 4, 8, 16, 32})
#: Request names for the listener's counters, as Kafka's ``ApiKeys`` names them.
API_NAMES: Final = {
    AdminApiKey.DESCRIBE_CONFIGS: "DescribeConfigs",
    AdminApiKey.INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
    AdminApiKey.DESCRIBE_CLIENT_QUOTAS: "DescribeClientQuotas",
    AdminApiKey.ALTER_CLIENT_QUOTAS: "AlterClientQuotas",
    AdminApiKey.LIST_CONFIG_RESOURCES: "ListConfigResources",
}


DESCRIBE_CHUNK: Final = 100
"""DescribeConfigs resources described between two yields to the event loop."""


def _describe_failed(
    request: DescribeConfigsRequest, error: BaseException, throttle: int
) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(
        results=tuple(
            DescribeConfigsResult(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                error_message=str(error),
            )
            for r in request.resources
        ),
        throttle_time_ms=throttle,
    )


class KafkaAdminHandlers:
    """Decodes admin frames and answers them from the :class:`AdminPlane`."""

    def __init__(
        self,
        plane: AdminPlane,
        authorizer: Authorizer,
        enforcement: Enforcement,
        clock: Callable[[], int],
    ) -> None:
        self.plane = plane
        self.authorizer = authorizer
        self.enforcement = enforcement
        self.clock = clock
        self._changes: set[asyncio.Task[bytes]] = set()

    def register(self, table: ApiTable) -> None:
        """Each admin API a row of the listener's table; the table charges the request."""
        charge = table.charge

        def serve(
            state: ConnectionState, frame: bytes, started_ns: int
        ) -> tuple[bytes, int] | Pending[bytes]:
            return self.handle(state, frame, lambda ms: charge(state, started_ns, ms))

        for key in SERVED:
            versions = ADMIN_VERSIONS[key]
            table.register(
                int(key), API_NAMES[key], (versions.min_version, versions.max_version), serve
            )

    def handle(
        self, state: ConnectionState, frame: bytes, finish: Callable[[int], int]
    ) -> tuple[bytes, int] | Pending[bytes]:
        """Answer one admin request; ``finish(mutation_throttle_ms)`` charges the
        request to the client's quotas and returns the throttle its response carries.

        Raises:
            MalformedFrameError: the frame does not decode (the connection closes).
            CloseConnectionError: an admin key at a version kip714 does not serve.
        """
        try:
            header, request = decode_admin_request(frame)
        except UnsupportedVersionError as error:
            raise CloseConnectionError(str(error)) from error
        version = header.api_version
        # Kafka reads a null client id as "".
        state.identify(header.client_id or "")

        def reply(response: AdminResponse) -> bytes:
            return encode_admin_response(header.correlation_id, header.api_key, version, response)

        match request:
            case DescribeConfigsRequest():
                throttle = finish(0)
                if len(request.resources) > DESCRIBE_CHUNK:
                    return self._pending(
                        self._describe_yielding(request, reply, throttle),
                        lambda error: reply(_describe_failed(request, error, throttle)),
                        throttle,
                    )
                results = tuple(
                    self._describe(
                        r.resource_type,
                        r.resource_name,
                        r.configuration_keys,
                        request.include_synonyms,
                    )
                    for r in request.resources
                )
                return reply(
                    DescribeConfigsResponse(results=results, throttle_time_ms=throttle)
                ), throttle
            case ListConfigResourcesRequest():
                throttle = finish(0)
                return reply(self._list(request, throttle)), throttle
            case DescribeClientQuotasRequest():
                throttle = finish(0)
                return reply(self._describe_quotas(request, throttle)), throttle
            case IncrementalAlterConfigsRequest():
                return self._alter_configs(state, request, reply, finish)
            case AlterClientQuotasRequest():
                return self._alter_quotas(state, request, reply, finish)
        raise CloseConnectionError(f"no handler for {type(request).__name__}")

    # -- reads -------------------------------------------------------------------------------

    async def _describe_yielding(
        self,
        request: DescribeConfigsRequest,
        reply: Callable[[AdminResponse], bytes],
        throttle: int,
    ) -> bytes:
        """A long DescribeConfigs answer built :data:`DESCRIBE_CHUNK` resources at a time,
        the event loop serving other connections between chunks."""
        results: list[DescribeConfigsResult] = []
        resources = request.resources
        for start in range(0, len(resources), DESCRIBE_CHUNK):
            if start:
                await asyncio.sleep(0)
            results.extend(
                self._describe(
                    r.resource_type, r.resource_name, r.configuration_keys, request.include_synonyms
                )
                for r in resources[start : start + DESCRIBE_CHUNK]
            )
        return reply(DescribeConfigsResponse(results=tuple(results), throttle_time_ms=throttle))

    def _describe(
        self,
        resource_type: int,
        name: str,
        keys: tuple[str, ...] | None,
        include_synonyms: bool,
    ) -> DescribeConfigsResult:
        if resource_type != CLIENT_METRICS_RESOURCE:
            return DescribeConfigsResult(
                resource_type=resource_type,
                resource_name=name,
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=unsupported_resource_message(resource_type),
            )
        return self.plane.describe_client_metrics(name, keys, include_synonyms=include_synonyms)

    def _list(
        self, request: ListConfigResourcesRequest, throttle: int
    ) -> ListConfigResourcesResponse:
        types = set(request.resource_types)
        if not types <= _LISTABLE_TYPES:
            return ListConfigResourcesResponse(
                config_resources=(),
                error_code=ErrorCode.UNSUPPORTED_VERSION,
                throttle_time_ms=throttle,
            )
        names = self.plane.client_metrics_names() if not types or 16 in types else ()
        return ListConfigResourcesResponse(
            config_resources=tuple(ConfigResource(resource_name=name) for name in names),
            throttle_time_ms=throttle,
        )

    def _describe_quotas(
        self, request: DescribeClientQuotasRequest, throttle: int
    ) -> DescribeClientQuotasResponse:
        try:
            entries = self.plane.describe_client_quotas(request.components, request.strict)
        except TelemetryError as refusal:
            return DescribeClientQuotasResponse(
                entries=None,
                error_code=refusal.error_code,
                error_message=str(refusal),
                throttle_time_ms=throttle,
            )
        return DescribeClientQuotasResponse(
            entries=with_kafka_key_names(entries), throttle_time_ms=throttle
        )

    # -- changes -----------------------------------------------------------------------------

    def _draw(self, entity: ClientEntity, count: int) -> tuple[int, int]:
        """Strict KIP-599 draws, one per item: how many were admitted, and the throttle."""
        return self.enforcement.clients.draw_mutations(entity, count, self.clock())

    def _alter_configs(
        self,
        state: ConnectionState,
        request: IncrementalAlterConfigsRequest,
        reply: Callable[[AdminResponse], bytes],
        finish: Callable[[int], int],
    ) -> tuple[bytes, int] | Pending[bytes]:
        resources = request.resources
        if not self.authorizer.may_alter(principal_of(state)):
            throttle = finish(0)
            refused = tuple(
                AlterConfigsResourceResponse(
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    error_message=CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
                )
                for r in resources
            )
            response = IncrementalAlterConfigsResponse(responses=refused, throttle_time_ms=throttle)
            return reply(response), throttle
        admitted, mutation_ms = (
            (len(resources), 0)
            if request.validate_only
            else self._draw(state.entity, len(resources))
        )
        throttle = finish(mutation_ms)
        throttled = tuple(
            AlterConfigsResourceResponse(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                error_message=THROTTLED_MESSAGE,
            )
            for r in resources[admitted:]
        )

        async def change() -> bytes:
            answers = await self.plane.alter_client_metrics(
                resources[:admitted], request.validate_only
            )
            return reply(
                IncrementalAlterConfigsResponse(
                    responses=answers + throttled, throttle_time_ms=throttle
                )
            )

        def failed(error: BaseException) -> bytes:
            answers = tuple(
                AlterConfigsResourceResponse(
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                    error_message=str(error),
                )
                for r in resources
            )
            return reply(
                IncrementalAlterConfigsResponse(responses=answers, throttle_time_ms=throttle)
            )

        return self._pending(change(), failed, throttle)

    def _alter_quotas(
        self,
        state: ConnectionState,
        request: AlterClientQuotasRequest,
        reply: Callable[[AdminResponse], bytes],
        finish: Callable[[int], int],
    ) -> tuple[bytes, int] | Pending[bytes]:
        entries = request.entries
        if not self.authorizer.may_alter(principal_of(state)):
            throttle = finish(0)
            refused = tuple(
                AlterClientQuotasResult(
                    entity=entry.entity,
                    error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    error_message=CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
                )
                for entry in entries
            )
            return reply(
                AlterClientQuotasResponse(entries=refused, throttle_time_ms=throttle)
            ), throttle
        admitted, mutation_ms = (
            (len(entries), 0) if request.validate_only else self._draw(state.entity, len(entries))
        )
        throttle = finish(mutation_ms)
        throttled = tuple(
            AlterClientQuotasResult(
                entity=entry.entity,
                error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                error_message=THROTTLED_MESSAGE,
            )
            for entry in entries[admitted:]
        )

        async def change() -> bytes:
            answers = await self.plane.alter_client_quotas(
                entries[:admitted], request.validate_only
            )
            return reply(
                AlterClientQuotasResponse(entries=answers + throttled, throttle_time_ms=throttle)
            )

        def failed(error: BaseException) -> bytes:
            answers = tuple(
                AlterClientQuotasResult(
                    entity=entry.entity,
                    error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                    error_message=str(error),
                )
                for entry in entries
            )
            return reply(AlterClientQuotasResponse(entries=answers, throttle_time_ms=throttle))

        return self._pending(change(), failed, throttle)

    def _pending(
        self,
        change: Coroutine[Any, Any, bytes],
        failed: Callable[[BaseException], bytes],
        throttle: int,
    ) -> Pending[bytes]:
        """The change runs as a task (kept until done); a failure is answered -1, the connection
        lives: a bug is logged here, and a task cancelled (the server stopping) answers too."""

        def refused(error: BaseException) -> tuple[bytes, int]:
            if not isinstance(error, asyncio.CancelledError):
                _log.error("an admin change failed", exc_info=error)
            return failed(error), throttle

        task = asyncio.create_task(change, name="kafka-admin-change")
        self._changes.add(task)
        task.add_done_callback(self._changes.discard)
        return Pending(task, lambda response: (response, throttle), refused)
