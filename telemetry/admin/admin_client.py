"""The CLI's two ways to reach a server: the HTTP admin API or the Kafka admin APIs.

Both answer in the HTTP API's JSON shapes, so the command line prints one
format whichever way it asked; a refusal raises :class:`AdminRefusedError`
with Kafka's error code and message. Blocking, stdlib only: a command line
makes one or two requests.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any, Final, Protocol

from quotas import DEFAULT
from telemetry.errors import ErrorCode
from telemetry.wire import SIZE_PREFIX, RequestHeader
from telemetry.wire.admin_apis import AdminApiKey, decode_admin_response, encode_admin_request
from telemetry.wire.config_messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigSource,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from telemetry.wire.quota_messages import (
    AlterClientQuotasEntry,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    ComponentData,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityData,
    QuotaMatchType,
    QuotaOp,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from telemetry.wire.admin_apis import AdminRequest, AdminResponse

#: An entity as the CLI and the HTTP API name it: type → name, ``<default>`` for a default.
Entity = dict[str, str]
TIMEOUT_S: Final = 30.0
_CLIENT_ID: Final = "kip714-cli"


class AdminRefusedError(Exception):
    """The server refused the request: Kafka's error code and message."""

    def __init__(self, code: int, message: str) -> None:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"error {code}"
        super().__init__(f"{name}: {message}" if message else name)
        self.code = code


class AdminUnreachableError(Exception):
    """The server could not be asked (connection, HTTP status without an admin answer)."""


class AdminClient(Protocol):
    def list_subscriptions(self) -> list[str]: ...

    def describe_subscription(self, name: str) -> dict[str, Any]: ...

    def alter_subscription(
        self, name: str, set_: Mapping[str, str], delete: Sequence[str], validate_only: bool
    ) -> None: ...

    def describe_quotas(self, entity: Entity) -> list[dict[str, Any]]: ...

    def alter_quotas(
        self,
        entity: Entity,
        set_: Mapping[str, float],
        delete: Sequence[str],
        validate_only: bool,
    ) -> None: ...


class HttpAdminClient:
    """``/admin/...`` on kip714's HTTP listener."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def _call(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            try:
                answer = json.loads(error.read())
            except ValueError:
                answer = None
            if isinstance(answer, dict) and "error" in answer:
                code = answer.get("error_code")
                if isinstance(code, int):
                    raise AdminRefusedError(code, str(answer["error"])) from None
                raise AdminUnreachableError(f"HTTP {error.code}: {answer['error']}") from None
            raise AdminUnreachableError(f"HTTP {error.code} from {self.base_url}{path}") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise AdminUnreachableError(f"{self.base_url}: {error}") from None

    def list_subscriptions(self) -> list[str]:
        return [s["name"] for s in self._call("GET", "/admin/subscriptions")["subscriptions"]]

    def describe_subscription(self, name: str) -> dict[str, Any]:
        for described in self._call("GET", "/admin/subscriptions")["subscriptions"]:
            if described["name"] == name:
                return dict(described)
        return {"name": name, "configs": {}}

    def alter_subscription(
        self, name: str, set_: Mapping[str, str], delete: Sequence[str], validate_only: bool
    ) -> None:
        body = {"set": dict(set_), "delete": list(delete), "validate_only": validate_only}
        self._call("POST", f"/admin/subscriptions/{urllib.parse.quote(name, safe='')}", body)

    def describe_quotas(self, entity: Entity) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode(entity)
        return list(self._call("GET", "/admin/quotas" + (f"?{query}" if query else ""))["quotas"])

    def alter_quotas(
        self,
        entity: Entity,
        set_: Mapping[str, float],
        delete: Sequence[str],
        validate_only: bool,
    ) -> None:
        body = {
            "entity": dict(entity),
            "set": dict(set_),
            "delete": list(delete),
            "validate_only": validate_only,
        }
        self._call("POST", "/admin/quotas", body)


class KafkaAdminClient:
    """The Kafka admin APIs on kip714's Kafka listener, one connection per request."""

    def __init__(self, bootstrap_server: str) -> None:
        host, _, port = bootstrap_server.rpartition(":")
        if not host or not port.isdigit():
            raise AdminUnreachableError(
                f"--bootstrap-server must be HOST:PORT, not {bootstrap_server!r}"
            )
        self.address = (host.strip("[]"), int(port))

    def _call(self, api_key: int, version: int, request: AdminRequest) -> AdminResponse:
        header = RequestHeader(
            api_key=api_key, api_version=version, correlation_id=1, client_id=_CLIENT_ID
        )
        try:
            with socket.create_connection(self.address, timeout=TIMEOUT_S) as connection:
                connection.sendall(encode_admin_request(header, request))
                (size,) = SIZE_PREFIX.unpack(_read_exactly(connection, SIZE_PREFIX.size))
                frame = _read_exactly(connection, size)
        except OSError as error:
            raise AdminUnreachableError(f"{self.address[0]}:{self.address[1]}: {error}") from None
        _, response = decode_admin_response(frame, api_key, version)
        return response

    def list_subscriptions(self) -> list[str]:
        response = self._call(AdminApiKey.LIST_CONFIG_RESOURCES, 0, ListConfigResourcesRequest())
        assert isinstance(response, ListConfigResourcesResponse)
        if response.error_code:
            raise AdminRefusedError(response.error_code, "")
        return [resource.resource_name for resource in response.config_resources]

    def describe_subscription(self, name: str) -> dict[str, Any]:
        request = DescribeConfigsRequest(
            resources=(DescribeConfigsResource(resource_type=16, resource_name=name),),
            include_synonyms=True,
        )
        response = self._call(AdminApiKey.DESCRIBE_CONFIGS, 4, request)
        assert isinstance(response, DescribeConfigsResponse)
        [result] = response.results
        if result.error_code:
            raise AdminRefusedError(result.error_code, result.error_message or "")
        return {
            "name": name,
            "configs": {
                entry.name: {
                    "value": entry.value,
                    "source": ConfigSource(entry.config_source).name,
                    "synonyms": [
                        {"value": s.value, "source": ConfigSource(s.source).name}
                        for s in entry.synonyms
                    ],
                }
                for entry in result.configs
            },
        }

    def alter_subscription(
        self, name: str, set_: Mapping[str, str], delete: Sequence[str], validate_only: bool
    ) -> None:
        ops = [
            AlterableConfig(name=key, config_operation=AlterConfigOp.DELETE, value=None)
            for key in delete
        ] + [
            AlterableConfig(name=key, config_operation=AlterConfigOp.SET, value=value)
            for key, value in set_.items()
        ]
        request = IncrementalAlterConfigsRequest(
            resources=(
                AlterConfigsResource(resource_type=16, resource_name=name, configs=tuple(ops)),
            ),
            validate_only=validate_only,
        )
        response = self._call(AdminApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request)
        assert isinstance(response, IncrementalAlterConfigsResponse)
        for answer in response.responses:
            if answer.error_code:
                raise AdminRefusedError(answer.error_code, answer.error_message or "")

    def describe_quotas(self, entity: Entity) -> list[dict[str, Any]]:
        components = tuple(
            ComponentData(entity_type=t, match_type=QuotaMatchType.DEFAULT, match=None)
            if name == DEFAULT
            else ComponentData(entity_type=t, match_type=QuotaMatchType.EXACT, match=name)
            for t, name in entity.items()
        )
        request = DescribeClientQuotasRequest(components=components, strict=False)
        response = self._call(AdminApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)
        assert isinstance(response, DescribeClientQuotasResponse)
        if response.error_code or response.entries is None:
            raise AdminRefusedError(response.error_code, response.error_message or "")
        return [
            {
                "entity": {
                    e.entity_type: DEFAULT if e.entity_name is None else e.entity_name
                    for e in found.entity
                },
                "dynamic": {v.key: v.value for v in found.values},
            }
            for found in response.entries
        ]

    def alter_quotas(
        self,
        entity: Entity,
        set_: Mapping[str, float],
        delete: Sequence[str],
        validate_only: bool,
    ) -> None:
        ops = [QuotaOp(key=key, value=0.0, remove=True) for key in delete] + [
            QuotaOp(key=key, value=value) for key, value in set_.items()
        ]
        data = tuple(
            EntityData(entity_type=t, entity_name=None if name == DEFAULT else name)
            for t, name in entity.items()
        )
        request = AlterClientQuotasRequest(
            entries=(AlterClientQuotasEntry(entity=data, ops=tuple(ops)),),
            validate_only=validate_only,
        )
        response = self._call(AdminApiKey.ALTER_CLIENT_QUOTAS, 1, request)
        assert isinstance(response, AlterClientQuotasResponse)
        for answer in response.entries:
            if answer.error_code:
                raise AdminRefusedError(answer.error_code, answer.error_message or "")


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = connection.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        chunks += chunk
    return bytes(chunks)
