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

from telemetry import toml_checks as toml

if TYPE_CHECKING:
    from collections.abc import Mapping

    from telemetry.security.settings import SecuritySettings


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminSettings:
    token: str | None = None
    #: Host header names accepted besides loopback names and the listener's own address.
    allowed_hosts: frozenset[str] = frozenset()
    #: None: the file has no ``[security]`` section, so everybody may alter.
    super_users: frozenset[str] | None = None


def parse_admin(admin: Mapping[str, Any] | None, security: SecuritySettings) -> AdminSettings:
    """``[admin]`` (None when absent; unknown keys are refused) and who may alter.

    ``[security] super_users`` is checked once, by ``security/settings.py``.
    """
    token: str | None = None
    allowed_hosts: frozenset[str] = frozenset()
    if admin is not None:
        toml.refuse_unknown("admin.", admin, {"token", "allowed_hosts"})
        if "token" in admin:
            token = toml.string("admin.token", admin["token"])
        hosts = toml.string_list("admin.allowed_hosts", admin.get("allowed_hosts", []))
        allowed_hosts = frozenset(h.lower().rstrip(".") for h in hosts)
    super_users = frozenset(security.super_users) if security.configured else None
    return AdminSettings(token=token, allowed_hosts=allowed_hosts, super_users=super_users)
