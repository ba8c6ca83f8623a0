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

if TYPE_CHECKING:
    from collections.abc import Mapping

    from telemetry.security.settings import SecuritySettings


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminSettings:
    token: str | None = None
    #: None: the file has no ``[security]`` section, so everybody may alter.
    super_users: frozenset[str] | None = None


def parse_admin(admin: Mapping[str, Any] | None, security: SecuritySettings) -> AdminSettings:
    """``[admin]`` (None when absent; unknown keys are refused) and who may alter.

    ``[security] super_users`` is checked once, by ``security/settings.py``.
    """
    token: str | None = None
    if admin is not None:
        toml.refuse_unknown("admin.", admin, {"token"})
        if "token" in admin:
            token = toml.string("admin.token", admin["token"])
    super_users = frozenset(security.super_users) if security.configured else None
    return AdminSettings(token=token, super_users=super_users)
