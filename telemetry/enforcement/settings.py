"""The ``[quotas]`` and ``[limits]`` settings: what an operator configures, checked at load.

Names follow Kafka's: ``window_num``/``window_size_s`` are
``quota.window.num``/``quota.window.size.seconds``; client quota keys are the
entity config keys of ``kafka-configs.sh`` with ``producer_byte_rate`` read as
``push_byte_rate``; ``[limits]`` are the broker settings ``max.connections``,
``max.connections.per.ip``, ``max.connection.creation.rate``,
``connections.max.idle.ms`` and ``queued.max.request.bytes``;
``partial_frame_timeout_ms`` has no Kafka counterpart (how long a started
Kafka frame may take to arrive whole), nor ``max_entity_series`` (how many
quota entities ``/metrics`` shows one by one).

An entity names a ``user``, a ``client_id`` or both; ``"<default>"`` is the
default at that level and an absent key means "not part of the entity", as
in Kafka's 8-level resolution. Every refusal is one ``ConfigError`` naming
the dotted key and the value.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from quotas import DEFAULT
from telemetry import toml_checks as toml
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ANONYMOUS_USER",
    "DEFAULT_CONNECTIONS_MAX_IDLE_MS",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS_PER_IP",
    "DEFAULT_MAX_CONNECTION_CREATION_RATE",
    "DEFAULT_MAX_ENTITY_SERIES",
    "DEFAULT_PARTIAL_FRAME_TIMEOUT_MS",
    "DEFAULT_QUEUED_MAX_REQUEST_BYTES",
    "ClientQuotaSettings",
    "IpQuotaSettings",
    "LimitSettings",
    "QuotaSettings",
    "parse_limits",
    "parse_quotas",
]

#: The user entity of ``User:ANONYMOUS``, every principal until SASL arrives.
ANONYMOUS_USER: Final = "ANONYMOUS"
DEFAULT_MAX_CONNECTIONS: Final = 10_000
DEFAULT_MAX_CONNECTIONS_PER_IP: Final = 1_000
DEFAULT_MAX_CONNECTION_CREATION_RATE: Final = 1_000
DEFAULT_CONNECTIONS_MAX_IDLE_MS: Final = 600_000
DEFAULT_QUEUED_MAX_REQUEST_BYTES: Final = 104_857_600
DEFAULT_PARTIAL_FRAME_TIMEOUT_MS: Final = 10_000
DEFAULT_MAX_ENTITY_SERIES: Final = 10_000
_INT32_MAX: Final = 2**31 - 1
_CLIENT_QUOTA_KEYS: Final = (
    "push_byte_rate",
    "push_decoded_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotaSettings:
    """One ``[[quotas.clients]]`` entity; ``None`` quota values are not set for it."""

    user: str | None = None
    client_id: str | None = None
    push_byte_rate: float | None = None
    push_decoded_byte_rate: float | None = None
    request_percentage: float | None = None
    controller_mutation_rate: float | None = None

    @property
    def entity(self) -> tuple[str | None, str | None]:
        return (self.user, self.client_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class IpQuotaSettings:
    """One ``[[quotas.ips]]`` entry; ``ip`` is an address or ``"<default>"``."""

    ip: str
    connection_creation_rate: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaSettings:
    """``[quotas]``: the sampling windows and the client and IP quota entities."""

    window_num: int = 11
    window_size_s: int = 1
    clients: tuple[ClientQuotaSettings, ...] = ()
    ips: tuple[IpQuotaSettings, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitSettings:
    """``[limits]``: broker-level connection and memory bounds."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    max_connection_creation_rate: int = DEFAULT_MAX_CONNECTION_CREATION_RATE
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    #: A Kafka frame must arrive whole within this long of its first byte, or its connection closes.
    partial_frame_timeout_ms: int = DEFAULT_PARTIAL_FRAME_TIMEOUT_MS
    #: Quota entities with series of their own on ``/metrics``; the rest are summed as ``<other>``.
    max_entity_series: int = DEFAULT_MAX_ENTITY_SERIES


def parse_quotas(section: Mapping[str, Any]) -> QuotaSettings:
    """The ``[quotas]`` table (empty: the defaults, no quota at all)."""
    toml.refuse_unknown("quotas.", section, {"window_num", "window_size_s", "clients", "ips"})
    return QuotaSettings(
        window_num=toml.integer("quotas.window_num", section.get("window_num", 11), 1, _INT32_MAX),
        window_size_s=toml.integer(
            "quotas.window_size_s", section.get("window_size_s", 1), 1, 3600
        ),
        clients=_clients(toml.array("quotas.clients", section.get("clients", []))),
        ips=_ips(toml.array("quotas.ips", section.get("ips", []))),
    )


def parse_limits(section: Mapping[str, Any]) -> LimitSettings:
    """The ``[limits]`` table; every value is a positive integer."""
    defaults = LimitSettings()
    known = set(LimitSettings.__dataclass_fields__)
    toml.refuse_unknown("limits.", section, known)
    values = {
        name: toml.integer(f"limits.{name}", section.get(name, getattr(defaults, name)), 1, None)
        for name in known
    }
    for name in (
        "max_connections",
        "max_connections_per_ip",
        "max_connection_creation_rate",
        "partial_frame_timeout_ms",
    ):
        if values[name] > _INT32_MAX:
            raise ConfigError(f"limits.{name}", values[name], f"must be at most {_INT32_MAX}")
    return LimitSettings(**values)


def _clients(entries: list[Any]) -> tuple[ClientQuotaSettings, ...]:
    clients: list[ClientQuotaSettings] = []
    seen: set[tuple[str | None, str | None]] = set()
    for index, raw in enumerate(entries):
        key = f"quotas.clients[{index}]"
        entry = toml.table(key, raw)
        toml.refuse_unknown(key + ".", entry, {"user", "client_id", *_CLIENT_QUOTA_KEYS})
        user = toml.string(f"{key}.user", entry["user"]) if "user" in entry else None
        client_id = (
            toml.string(f"{key}.client_id", entry["client_id"]) if "client_id" in entry else None
        )
        if user is None and client_id is None:
            raise ConfigError(key, dict(entry), "an entity names a user, a client_id or both")
        values = {
            name: _rate(f"{key}.{name}", entry[name])
            for name in _CLIENT_QUOTA_KEYS
            if name in entry
        }
        if not values:
            raise ConfigError(
                key, dict(entry), f"set at least one of {', '.join(_CLIENT_QUOTA_KEYS)}"
            )
        if (user, client_id) in seen:
            raise ConfigError(key, dict(entry), "this entity is already configured")
        seen.add((user, client_id))
        clients.append(ClientQuotaSettings(user=user, client_id=client_id, **values))
    return tuple(clients)


def _ips(entries: list[Any]) -> tuple[IpQuotaSettings, ...]:
    ips: list[IpQuotaSettings] = []
    seen: set[str] = set()
    for index, raw in enumerate(entries):
        key = f"quotas.ips[{index}]"
        entry = toml.table(key, raw)
        toml.refuse_unknown(key + ".", entry, {"ip", "connection_creation_rate"})
        if "ip" not in entry or "connection_creation_rate" not in entry:
            raise ConfigError(key, dict(entry), "needs ip and connection_creation_rate")
        ip = toml.string(f"{key}.ip", entry["ip"])
        if ip != DEFAULT:
            try:
                ip = ipaddress.ip_address(ip).compressed
            except ValueError:
                raise ConfigError(f"{key}.ip", entry["ip"], "not an IP address") from None
        if ip in seen:
            raise ConfigError(f"{key}.ip", entry["ip"], "this address is already configured")
        seen.add(ip)
        rate = toml.integer(
            f"{key}.connection_creation_rate", entry["connection_creation_rate"], 1, _INT32_MAX
        )
        ips.append(IpQuotaSettings(ip=ip, connection_creation_rate=rate))
    return tuple(ips)


def _rate(key: str, value: object) -> float:
    """A quota value: a positive finite number (Kafka refuses zero and negative quotas)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, value, "expected a number")
    number = float(value)
    if not 0 < number < float("inf"):
        raise ConfigError(key, value, "must be a positive number")
    return number
