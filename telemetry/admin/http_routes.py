"""The HTTP admin API: ``/admin/subscriptions`` and ``/admin/quotas`` in JSON.

The same :class:`~telemetry.admin.plane.AdminPlane` as the Kafka admin APIs,
so the same validation, error codes and messages, durability and precedence:

* ``GET /admin/subscriptions`` — every subscription, described;
* ``GET /admin/subscriptions/{name}`` — each key's value in force, its source
  (``CLIENT_METRICS_CONFIG`` dynamic, ``STATIC_BROKER_CONFIG`` the file,
  ``DEFAULT_CONFIG``) and every layer that sets it;
* ``POST /admin/subscriptions/{name}`` with ``{"set": {...}, "delete": [...],
  "append": {...}, "subtract": {...}, "validate_only": false}``;
* ``DELETE /admin/subscriptions/{name}`` — removes every dynamic key;
* ``GET /admin/quotas`` (``?user=&client-id=&ip=`` narrow it; ``<default>``
  names a default entity) — per entity the file's values, the dynamic ones
  and those in force;
* ``POST /admin/quotas`` with ``{"entity": {"user": "alice"}, "set": {...},
  "delete": [...], "validate_only": false}``; ``DELETE /admin/quotas?user=…``;
* ``GET /admin/metadata`` — the store, its offset and the records of this
  node's image (``metadata_json.py``).

Authentication and the browser rules (Origin, Host, Content-Type) are the
one authorizer's (:mod:`telemetry.admin.authorizer`, with
:mod:`telemetry.admin.http_guard`). Every change that is not
``validate_only`` draws one token from the caller's strict
``controller_mutation_rate`` (KIP-599, as on the Kafka listener; the caller
is the client certificate's principal, else ``ANONYMOUS``, client id ``""``).
A refused change answers 400 (Kafka's 40 / 42), 429 (89, with
``Retry-After``) or 500, with ``error_code`` and ``error``.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from quotas import DEFAULT
from telemetry.admin.authorizer import THROTTLED_MESSAGE
from telemetry.admin.metadata_json import metadata_json
from telemetry.enforcement import ClientEntity
from telemetry.errors import ErrorCode, TelemetryError
from telemetry.http.principal import request_user
from telemetry.wire.config_messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigSource,
)
from telemetry.wire.quota_messages import (
    AlterClientQuotasEntry,
    ComponentData,
    EntityData,
    QuotaMatchType,
    QuotaOp,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from telemetry.admin.authorizer import Authorizer
    from telemetry.admin.plane import AdminPlane
    from telemetry.enforcement import ClientQuotas, QuotaSettings
    from telemetry.wire.config_messages import DescribeConfigsResult

__all__ = ["add_admin_routes"]

ENTITY_TYPES: Final = ("user", "client-id", "ip")
_STATIC_CLIENT_KEYS: Final = (
    "push_byte_rate",
    "push_decoded_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
)
#: The most a request body may hold: a change is a few keys.
MAX_BODY_BYTES: Final = 64 * 1024


class _BadRequestError(Exception):
    """The request body or query is not what the API takes (400)."""


def _status(code: int) -> int:
    if code == ErrorCode.NONE:
        return 200
    if code in (ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST, ErrorCode.UNSUPPORTED_VERSION):
        return 400
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return 403
    if code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
        return 429
    return 500


def _error(status: int, message: str, code: int | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if code is not None:
        body["error_code"] = code
    return web.json_response(body, status=status)


def describe_json(result: DescribeConfigsResult) -> dict[str, Any]:
    return {
        "name": result.resource_name,
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


def _name_json(name: str | None) -> str:
    return DEFAULT if name is None else name


def _static_quota_entities(
    static: QuotaSettings,
) -> dict[tuple[tuple[str, str], ...], dict[str, float]]:
    entities: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    for client in static.clients:
        key = tuple(
            (entity_type, name)
            for entity_type, name in (("user", client.user), ("client-id", client.client_id))
            if name is not None
        )
        values = {k: getattr(client, k) for k in _STATIC_CLIENT_KEYS}
        entities[key] = {k: v for k, v in values.items() if v is not None}
    for ip in static.ips:
        entities[(("ip", ip.ip),)] = {
            "connection_creation_rate": float(ip.connection_creation_rate)
        }
    return entities


class _ThrottledError(Exception):
    """The caller's ``controller_mutation_rate`` refused the change (429)."""

    def __init__(self, throttle_ms: int) -> None:
        super().__init__(throttle_ms)
        self.throttle_ms = throttle_ms


class _AdminRoutes:
    def __init__(
        self,
        plane: AdminPlane,
        authorizer: Authorizer,
        quotas: ClientQuotas,
        clock: Callable[[], int],
    ) -> None:
        self.plane = plane
        self.authorizer = authorizer
        self.quotas = quotas
        self.clock = clock

    def guarded(
        self, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def guard(request: web.Request) -> web.StreamResponse:
            refusal = self.authorizer.http_admin_request_refusal(request)
            if refusal is not None:
                return _error(refusal.status, refusal.message)
            try:
                return await handler(request)
            except _BadRequestError as error:
                return _error(400, str(error))
            except _ThrottledError as throttled:
                response = _error(429, THROTTLED_MESSAGE, int(ErrorCode.THROTTLING_QUOTA_EXCEEDED))
                response.headers["Retry-After"] = str(
                    max(1, math.ceil(throttled.throttle_ms / 1000))
                )
                return response

        return guard

    def _draw(self, request: web.Request, validate_only: bool) -> None:
        """One strict mutation token for the one resource or entity a call changes."""
        if validate_only:
            return
        entity = ClientEntity(request_user(request), "")
        admitted, throttle_ms = self.quotas.draw_mutations(entity, 1, self.clock())
        if not admitted:
            raise _ThrottledError(throttle_ms)

    async def metadata(self, request: web.Request) -> web.Response:
        return web.json_response(metadata_json(self.plane.store))

    # -- subscriptions -----------------------------------------------------------------------

    async def list_subscriptions(self, request: web.Request) -> web.Response:
        plane = self.plane
        described = [
            describe_json(plane.describe_client_metrics(name, include_synonyms=True))
            for name in plane.client_metrics_names()
        ]
        return web.json_response({"subscriptions": described})

    async def describe_subscription(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.plane.client_metrics_names():
            return _error(404, f"no subscription named {name!r}")
        result = self.plane.describe_client_metrics(name, include_synonyms=True)
        return web.json_response(describe_json(result))

    async def alter_subscription(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        _refuse_unknown(body, {"set", "delete", "append", "subtract", "validate_only"})
        ops: list[AlterableConfig] = []
        for field, operation in (
            ("delete", AlterConfigOp.DELETE),
            ("set", AlterConfigOp.SET),
            ("append", AlterConfigOp.APPEND),
            ("subtract", AlterConfigOp.SUBTRACT),
        ):
            if operation == AlterConfigOp.DELETE:
                for key in _string_list(body, field):
                    ops.append(AlterableConfig(name=key, config_operation=operation, value=None))
            else:
                for key, value in _string_map(body, field).items():
                    ops.append(AlterableConfig(name=key, config_operation=operation, value=value))
        validate_only = _validate_only(body)
        self._draw(request, validate_only)
        return await self._alter_subscription(request.match_info["name"], tuple(ops), validate_only)

    async def delete_subscription(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        dynamic = self.plane.store.image.client_metrics.get(name, {})
        if not dynamic:
            return _error(404, f"subscription {name!r} has no dynamic config")
        ops = tuple(
            AlterableConfig(name=key, config_operation=AlterConfigOp.DELETE, value=None)
            for key in sorted(dynamic)
        )
        validate_only = _query_flag(request, "validate_only")
        self._draw(request, validate_only)
        return await self._alter_subscription(name, ops, validate_only)

    async def _alter_subscription(
        self, name: str, ops: tuple[AlterableConfig, ...], validate_only: bool
    ) -> web.Response:
        resource = AlterConfigsResource(resource_type=16, resource_name=name, configs=ops)
        [answer] = await self.plane.alter_client_metrics((resource,), validate_only)
        if answer.error_code != ErrorCode.NONE:
            return _error(_status(answer.error_code), answer.error_message or "", answer.error_code)
        described = describe_json(self.plane.describe_client_metrics(name, include_synonyms=True))
        return web.json_response({**described, "validate_only": validate_only})

    # -- quotas ------------------------------------------------------------------------------

    async def list_quotas(self, request: web.Request) -> web.Response:
        wanted = {t: request.query[t] for t in ENTITY_TYPES if t in request.query}
        unknown = set(request.query) - set(ENTITY_TYPES)
        if unknown:
            raise _BadRequestError(f"unknown query parameters: {', '.join(sorted(unknown))}")
        static = _static_quota_entities(self.plane.static_quotas)
        dynamic = {
            tuple((t, _name_json(n)) for t, n in entity): dict(values)
            for entity, values in self.plane.store.image.client_quotas.items()
        }
        found = []
        for entity in sorted(set(static) | set(dynamic)):
            names = dict(entity)
            if any(names.get(t) != n for t, n in wanted.items()):
                continue
            file_values = static.get(entity, {})
            dynamic_values = dynamic.get(entity, {})
            found.append(
                {
                    "entity": names,
                    "static": file_values,
                    "dynamic": dynamic_values,
                    "in_force": {**file_values, **dynamic_values},
                }
            )
        return web.json_response({"quotas": found})

    async def alter_quotas(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        _refuse_unknown(body, {"entity", "set", "delete", "validate_only"})
        entity = _entity(body.get("entity"))
        ops = [QuotaOp(key=key, value=0.0, remove=True) for key in _string_list(body, "delete")]
        for key, value in _number_map(body, "set").items():
            ops.append(QuotaOp(key=key, value=value))
        validate_only = _validate_only(body)
        self._draw(request, validate_only)
        return await self._alter_quotas(entity, tuple(ops), validate_only)

    async def delete_quotas(self, request: web.Request) -> web.Response:
        names = {t: request.query[t] for t in ENTITY_TYPES if t in request.query}
        entity = _entity(names)
        key = tuple(sorted((e.entity_type, e.entity_name) for e in entity))
        current = self.plane.store.image.client_quotas.get(key, {})
        if not current:
            return _error(404, "this entity has no dynamic quota")
        ops = tuple(QuotaOp(key=k, value=0.0, remove=True) for k in sorted(current))
        validate_only = _query_flag(request, "validate_only")
        self._draw(request, validate_only)
        return await self._alter_quotas(entity, ops, validate_only)

    async def _alter_quotas(
        self, entity: tuple[EntityData, ...], ops: tuple[QuotaOp, ...], validate_only: bool
    ) -> web.Response:
        entry = AlterClientQuotasEntry(entity=entity, ops=ops)
        [answer] = await self.plane.alter_client_quotas((entry,), validate_only)
        if answer.error_code != ErrorCode.NONE:
            return _error(_status(answer.error_code), answer.error_message or "", answer.error_code)
        components = tuple(
            ComponentData(
                entity_type=e.entity_type,
                match_type=QuotaMatchType.EXACT
                if e.entity_name is not None
                else QuotaMatchType.DEFAULT,
                match=e.entity_name,
            )
            for e in entity
        )
        try:
            found = self.plane.describe_client_quotas(components, strict=True)
        except TelemetryError as error:  # validated above: not expected
            return _error(500, str(error))
        dynamic = {v.key: v.value for entry in found for v in entry.values}
        names = {e.entity_type: _name_json(e.entity_name) for e in entity}
        return web.json_response(
            {"entity": names, "dynamic": dynamic, "validate_only": validate_only}
        )


async def _json_body(request: web.Request) -> Mapping[str, Any]:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise _BadRequestError(f"the body is larger than {MAX_BODY_BYTES} bytes")
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise _BadRequestError(f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw or b"{}")
    except ValueError as error:
        raise _BadRequestError(f"the body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise _BadRequestError("the body must be a JSON object")
    return body


def _refuse_unknown(body: Mapping[str, Any], known: set[str]) -> None:
    unknown = set(body) - known
    if unknown:
        raise _BadRequestError(f"unknown fields: {', '.join(sorted(unknown))}")


def _validate_only(body: Mapping[str, Any]) -> bool:
    value = body.get("validate_only", False)
    if not isinstance(value, bool):
        raise _BadRequestError("validate_only must be true or false")
    return value


def _query_flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name, "false").lower()
    if value not in ("true", "false"):
        raise _BadRequestError(f"{name} must be true or false")
    return value == "true"


def _string_list(body: Mapping[str, Any], field: str) -> list[str]:
    value = body.get(field, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _BadRequestError(f"{field} must be a list of key names")
    return value


def _string_map(body: Mapping[str, Any], field: str) -> dict[str, str]:
    value = body.get(field, {})
    if not isinstance(value, dict):
        raise _BadRequestError(f"{field} must be an object of key: value")
    converted = {}
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, str | int):
            raise _BadRequestError(f"{field}.{key} must be a string or an integer")
        converted[key] = str(item)
    return converted


def _number_map(body: Mapping[str, Any], field: str) -> dict[str, float]:
    value = body.get(field, {})
    if not isinstance(value, dict):
        raise _BadRequestError(f"{field} must be an object of key: number")
    converted = {}
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise _BadRequestError(f"{field}.{key} must be a number")
        converted[key] = float(item)
    return converted


def _entity(value: object) -> tuple[EntityData, ...]:
    if not isinstance(value, dict) or not value:
        raise _BadRequestError(
            'entity must name at least one of user, client-id, ip: {"user": "alice"}'
        )
    entity = []
    for entity_type, name in value.items():
        if entity_type not in ENTITY_TYPES:
            raise _BadRequestError(
                f"unknown entity type {entity_type!r}: one of {', '.join(ENTITY_TYPES)}"
            )
        if name is not None and not isinstance(name, str):
            raise _BadRequestError(f'entity.{entity_type} must be a name, "<default>" or null')
        entity.append(
            EntityData(
                entity_type=entity_type, entity_name=None if name in (None, DEFAULT) else name
            )
        )
    return tuple(entity)


def add_admin_routes(
    app: web.Application,
    plane: AdminPlane,
    *,
    authorizer: Authorizer,
    quotas: ClientQuotas,
    clock: Callable[[], int],
) -> None:
    """The ``/admin/`` routes; see the module docstring for the API and its authentication."""
    routes = _AdminRoutes(plane, authorizer, quotas, clock)
    guarded = routes.guarded
    app.router.add_get("/admin/subscriptions", guarded(routes.list_subscriptions))
    app.router.add_get("/admin/subscriptions/{name}", guarded(routes.describe_subscription))
    app.router.add_post("/admin/subscriptions/{name}", guarded(routes.alter_subscription))
    app.router.add_delete("/admin/subscriptions/{name}", guarded(routes.delete_subscription))
    app.router.add_get("/admin/quotas", guarded(routes.list_quotas))
    app.router.add_post("/admin/quotas", guarded(routes.alter_quotas))
    app.router.add_delete("/admin/quotas", guarded(routes.delete_quotas))
    app.router.add_get("/admin/metadata", guarded(routes.metadata))
