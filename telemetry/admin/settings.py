"""``[admin]`` and ``[security]``: the HTTP admin token and who may alter.

``[security] super_users`` lists Kafka principals (``"User:admin"``); a file
with a ``[security]`` section lets only them alter subscriptions and quotas.
``[admin] token`` is the bearer token the HTTP admin API requires; without
one the HTTP admin API answers only when the HTTP listener is bound to a
loopback address.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from telemetry import toml_checks as toml
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminSettings:
    token: str | None = None
    #: None: the file has no ``[security]`` section, so everybody may alter.
    super_users: frozenset[str] | None = None


def parse_admin(
    admin: Mapping[str, Any] | None, security: Mapping[str, Any] | None
) -> AdminSettings:
    """The two sections (None when absent); unknown keys are refused."""
    token: str | None = None
    if admin is not None:
        toml.refuse_unknown("admin.", admin, {"token"})
        if "token" in admin:
            token = toml.string("admin.token", admin["token"])
    super_users: frozenset[str] | None = None
    if security is not None:
        super_users = frozenset(_principals(security.get("super_users", [])))
    return AdminSettings(token=token, super_users=super_users)


def _principals(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("security.super_users", value, 'expected a list like ["User:admin"]')
    for principal in value:
        kind, _, name = principal.partition(":")
        if kind != "User" or not name:
            raise ConfigError("security.super_users", principal, 'expected "User:<name>"')
    return value
