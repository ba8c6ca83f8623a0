"""``[admin]`` and ``[security]``: the HTTP admin token and who may alter.

``[security] super_users`` lists Kafka principals (``"User:admin"``); a file
with a ``[security]`` section lets only them alter subscriptions and quotas.
``[admin] token`` is the bearer token the HTTP admin API requires; without
one the HTTP admin API answers only when the HTTP listener is bound to a
loopback address. ``[admin] allowed_hosts`` lists the extra ``Host`` names a
request not carrying the token may name (telemetry.admin.http_guard).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminSettings:
    token: str | None = None
    #: Host header names accepted besides loopback names and the listener's own address.
    allowed_hosts: frozenset[str] = frozenset()
    #: None: the file has no ``[security]`` section, so everybody may alter.
    super_users: frozenset[str] | None = None


def parse_admin(
    admin: Mapping[str, Any] | None, security: Mapping[str, Any] | None
) -> AdminSettings:
    """The two sections (None when absent); unknown keys are refused."""
    token: str | None = None
    allowed_hosts: frozenset[str] = frozenset()
    if admin is not None:
        _refuse_unknown("admin.", admin, {"token", "allowed_hosts"})
        if "token" in admin:
            token = admin["token"]
            if not isinstance(token, str) or not token:
                raise ConfigError("admin.token", token, "expected a non-empty string")
        hosts = admin.get("allowed_hosts", [])
        if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
            raise ConfigError("admin.allowed_hosts", hosts, 'expected a list like ["kip714.lan"]')
        allowed_hosts = frozenset(h.lower().rstrip(".") for h in hosts)
    super_users: frozenset[str] | None = None
    if security is not None:
        super_users = frozenset(_principals(security.get("super_users", [])))
    return AdminSettings(token=token, allowed_hosts=allowed_hosts, super_users=super_users)


def _principals(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("security.super_users", value, 'expected a list like ["User:admin"]')
    for principal in value:
        kind, _, name = principal.partition(":")
        if kind != "User" or not name:
            raise ConfigError("security.super_users", principal, 'expected "User:<name>"')
    return value


def _refuse_unknown(prefix: str, table: Mapping[str, Any], known: set[str]) -> None:
    for key in table:
        if key not in known:
            raise ConfigError(f"{prefix}{key}", table[key], "unknown key")
