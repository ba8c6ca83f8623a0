"""The admin plane's state: the metadata store, applied to the running server.

One :class:`AdminPlane` per server, shared by the Kafka admin APIs and the
HTTP admin API. It owns the opened metadata store (local, or the Kafka topic
several nodes share: ``telemetry.metastore.backend.MetadataBackend``) and
keeps what is in force equal to *static then dynamic*:

* subscriptions: the file's ``[subscriptions]`` merged key by key with the
  dynamic keys (``merge_subscriptions``), installed in the manager's
  :class:`~telemetry.core.subscriptions.SubscriptionRegistry`, whose version then
  moves, so clients are re-evaluated on their next request;
* quotas: the file's ``[quotas]`` entities overridden key by key by the
  dynamic entities, handed to :meth:`Enforcement.apply`, which only swaps the
  bounds on live sensors (Kafka's ``KafkaMetric.config(...)``): recorded usage
  is never reset. ``ip`` entities become per-IP connection creation rates.

A change is evaluated against the current image, appended (fsync, or the
cluster's acknowledgement) in a worker thread, and only then answered; one
asyncio lock serialises the changes, so a change never works from an image
another change is about to replace. With a shared store, changes other nodes
make arrive from the store's thread and are applied on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from quotas import DEFAULT
from telemetry.admin.client_metrics_alter import (
    DUPLICATE_RESOURCE_MESSAGE,
    alter_client_metrics,
    duplicate_resources,
)
from telemetry.admin.precedence import (
    client_metrics_names,
    describe_client_metrics,
    merge_subscriptions,
)
from telemetry.admin.quota_alter import alter_client_quotas, describe_client_quotas
from telemetry.enforcement import ClientQuotaSettings, IpQuotaSettings, QuotaSettings
from telemetry.errors import ErrorCode, TelemetryError
from telemetry.metastore import CLIENT_METRICS_RESOURCE
from telemetry.wire.config_messages import AlterConfigsResourceResponse, DescribeConfigsResult

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from telemetry.core.subscriptions import Subscription, SubscriptionRegistry
    from telemetry.enforcement import Enforcement, LimitSettings
    from telemetry.metastore import MetadataImage, MetadataRecord, QuotaEntity
    from telemetry.metastore.backend import MetadataBackend
    from telemetry.wire.config_messages import AlterConfigsResource
    from telemetry.wire.quota_messages import (
        AlterClientQuotasEntry,
        AlterClientQuotasResult,
        ComponentData,
        DescribeClientQuotasEntry,
        EntityData,
    )

_log = logging.getLogger(__name__)

_CLIENT_KEYS: Final = (
    "push_byte_rate",
    "push_decoded_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
)
_IP_KEY: Final = "connection_creation_rate"
STORE_FAILED_MESSAGE: Final = "The metadata store could not record the change: "


def unsupported_resource_message(resource_type: int) -> str:
    """Kafka's answer for a resource type it does not handle here (42)."""
    return f"Unsupported resource type: {resource_type}"


def merge_quotas(
    static: QuotaSettings, dynamic: Mapping[QuotaEntity, Mapping[str, float]]
) -> QuotaSettings:
    """The file's quota entities, each key overridden by the same entity's dynamic key."""
    clients: dict[tuple[str | None, str | None], dict[str, float]] = {}
    for entry in static.clients:
        configured = {key: getattr(entry, key) for key in _CLIENT_KEYS}
        clients[entry.entity] = {k: v for k, v in configured.items() if v is not None}
    ips = {entry.ip: entry.connection_creation_rate for entry in static.ips}
    for entity, values in dynamic.items():
        names = dict(entity)
        if "ip" in names:
            address = names["ip"]
            ip = DEFAULT if address is None else ipaddress.ip_address(address).compressed
            if _IP_KEY in values:
                ips[ip] = int(values[_IP_KEY])
            continue
        key = (_level(names, "user"), _level(names, "client-id"))
        clients.setdefault(key, {}).update(
            {name: value for name, value in values.items() if name in _CLIENT_KEYS}
        )
    return replace(
        static,
        clients=tuple(
            ClientQuotaSettings(user=user, client_id=client_id, **values)
            for (user, client_id), values in clients.items()
            if values
        ),
        ips=tuple(
            IpQuotaSettings(ip=ip, connection_creation_rate=rate) for ip, rate in ips.items()
        ),
    )


def _level(names: Mapping[str, str | None], entity_type: str) -> str | None:
    """Absent: not part of the entity (None); a null name: the default (``<default>``)."""
    if entity_type not in names:
        return None
    name = names[entity_type]
    return DEFAULT if name is None else name


class AdminPlane:
    """Static settings plus the store's image, applied; reads and changes for both front doors."""

    def __init__(
        self,
        store: MetadataBackend,
        subscriptions: SubscriptionRegistry,
        enforcement: Enforcement,
        *,
        static_subscriptions: Iterable[Subscription],
        static_quotas: QuotaSettings,
        limits: LimitSettings,
    ) -> None:
        self.store = store
        self._registry = subscriptions
        self._enforcement = enforcement
        self._static_subscriptions = tuple(static_subscriptions)
        self._static_quotas = static_quotas
        self._limits = limits
        self._changing = asyncio.Lock()
        self._apply_scheduled = False

    # -- applying ----------------------------------------------------------------------------

    def reload(
        self,
        subscriptions: Iterable[Subscription],
        quotas: QuotaSettings,
        limits: LimitSettings,
    ) -> None:
        """SIGHUP: a new static layer under the same dynamic one.

        Raises ``ValueError`` (nothing changed) when the quota windows differ.
        """
        merged = merge_quotas(quotas, self.store.image.client_quotas)
        self._enforcement.apply(merged, limits)
        self._static_quotas, self._limits = quotas, limits
        self._static_subscriptions = tuple(subscriptions)
        self._apply_subscriptions()

    def apply(self) -> None:
        """Make what is in force equal to static then dynamic (at start, after a change)."""
        self._apply_quotas()
        self._apply_subscriptions()

    def follow_store(self) -> None:
        """Run by the changes other nodes make to a shared store, as they arrive.

        The store calls back on its own thread; the application runs on the
        event loop, at most one pending at a time (it reads the newest image).
        """
        loop = asyncio.get_running_loop()

        def changed() -> None:
            if self._apply_scheduled:
                return  # the scheduled application reads the image this change made
            self._apply_scheduled = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server is gone
                loop.call_soon_threadsafe(self._apply_changed)

        self.store.watch(changed)
        changed()  # a change applied between the last apply() and the registration

    def _apply_changed(self) -> None:
        self._apply_scheduled = False
        try:
            self.apply()
        except Exception:
            _log.exception("applying the metadata store's image failed")

    def _apply_subscriptions(self) -> None:
        registry = self._registry
        merged = merge_subscriptions(self._static_subscriptions, self.store.image.client_metrics)
        wanted = {subscription.name for subscription in merged}
        for name in [s.name for s in registry if s.name not in wanted]:
            registry.update(name, {})
        for subscription in merged:
            if registry.get(subscription.name) != subscription:
                registry.put(subscription)  # moves the version: re-evaluated on the next request

    def _apply_quotas(self) -> None:
        merged = merge_quotas(self._static_quotas, self.store.image.client_quotas)
        self._enforcement.apply(merged, self._limits)

    # -- reads -------------------------------------------------------------------------------

    @property
    def static_subscriptions(self) -> tuple[Subscription, ...]:
        return self._static_subscriptions

    @property
    def static_quotas(self) -> QuotaSettings:
        return self._static_quotas

    def client_metrics_names(self) -> tuple[str, ...]:
        """What ListConfigResources lists: every name DescribeConfigs knows."""
        return client_metrics_names(self._static_subscriptions, self.store.image.client_metrics)

    def describe_client_metrics(
        self,
        name: str,
        configuration_keys: Sequence[str] | None = None,
        *,
        include_synonyms: bool = False,
    ) -> DescribeConfigsResult:
        static = next((s for s in self._static_subscriptions if s.name == name), None)
        return describe_client_metrics(
            name,
            static,
            self.store.image.client_metrics.get(name),
            configuration_keys=configuration_keys,
            include_synonyms=include_synonyms,
        )

    def describe_client_quotas(
        self, components: Sequence[ComponentData], strict: bool
    ) -> tuple[DescribeClientQuotasEntry, ...]:
        """The dynamic entities matching the filter (the layer the admin APIs change).

        Raises:
            InvalidRequestError, UnsupportedEntityTypeError: a bad filter.
        """
        return describe_client_quotas(self.store.image, components, strict)

    # -- changes -----------------------------------------------------------------------------

    async def alter_client_metrics(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool
    ) -> tuple[AlterConfigsResourceResponse, ...]:
        """IncrementalAlterConfigs: one answer per resource, after the change is durable."""
        async with self._changing:
            image = self.store.image
            repeated = duplicate_resources(resources)
            answers: list[AlterConfigsResourceResponse] = []
            records: list[MetadataRecord] = []
            changed: list[int] = []  # answers whose resource wrote records
            for resource in resources:
                kind, name = resource.resource_type, resource.resource_name
                if (kind, name) in repeated:
                    answers.append(
                        _refused(kind, name, ErrorCode.INVALID_REQUEST, DUPLICATE_RESOURCE_MESSAGE)
                    )
                    continue
                if kind != CLIENT_METRICS_RESOURCE:
                    answers.append(
                        _refused(
                            kind,
                            name,
                            ErrorCode.INVALID_REQUEST,
                            unsupported_resource_message(kind),
                        )
                    )
                    continue
                try:
                    alteration = alter_client_metrics(
                        name, image.client_metrics.get(name, {}), resource.configs
                    )
                except TelemetryError as refusal:
                    answers.append(_refused(kind, name, refusal.error_code, str(refusal)))
                    continue
                if alteration.records:
                    records.extend(alteration.records)
                    changed.append(len(answers))
                answers.append(AlterConfigsResourceResponse(resource_type=kind, resource_name=name))
            if records and not validate_only:
                failure = await self._append(records)
                if failure is not None:
                    for index in changed:
                        answer = answers[index]
                        answers[index] = _refused(
                            answer.resource_type,
                            answer.resource_name,
                            ErrorCode.UNKNOWN_SERVER_ERROR,
                            STORE_FAILED_MESSAGE + failure,
                        )
            return tuple(answers)

    async def alter_client_quotas(
        self, entries: Sequence[AlterClientQuotasEntry], validate_only: bool
    ) -> tuple[AlterClientQuotasResult, ...]:
        """AlterClientQuotas: one answer per entity, after the change is durable."""
        async with self._changing:
            records, results = alter_client_quotas(self.store.image, entries)
            if not records or validate_only:
                return results
            failure = await self._append(records)
            if failure is None:
                return results
            written = {record.entity for record in records}
            return tuple(
                replace(
                    result,
                    error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                    error_message=STORE_FAILED_MESSAGE + failure,
                )
                if _entity_key(result.entity) in written
                else result
                for result in results
            )

    async def _append(self, records: Sequence[MetadataRecord]) -> str | None:
        """Append durably in a thread and apply; the failure's text, or None.

        The application runs when the append returns even if the request
        awaiting it is cancelled meanwhile (a stopping server): the store has
        the change, so the server must run by it.
        """
        appended = asyncio.ensure_future(asyncio.to_thread(self.store.append, records))
        appended.add_done_callback(self._appended)
        try:
            await asyncio.shield(appended)
        except Exception as error:
            return str(error)
        return None

    def _appended(self, appended: asyncio.Future[MetadataImage]) -> None:
        if appended.cancelled():
            return
        error = appended.exception()
        if error is not None:
            _log.error("the metadata store refused a change: %s", error)
            return
        try:
            self.apply()
        except Exception:
            _log.exception("applying the metadata store's image failed")


def _entity_key(entity: Sequence[EntityData]) -> QuotaEntity:
    pairs = [(e.entity_type, e.entity_name) for e in entity]
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def _refused(
    resource_type: int, name: str, code: ErrorCode, message: str
) -> AlterConfigsResourceResponse:
    return AlterConfigsResourceResponse(
        resource_type=resource_type, resource_name=name, error_code=code, error_message=message
    )
