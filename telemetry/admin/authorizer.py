"""Who may do what: the one authorizer every door asks.

Kafka authorises reads of client-metrics subscriptions and client quotas with
DESCRIBE_CONFIGS on the cluster and changes with ALTER_CONFIGS on the cluster
(``ControllerApis.authorizeAlterResource``, ``KafkaApis.handleAlterClientQuotas``),
and SCRAM credentials (KIP-554) with DESCRIBE/ALTER on the cluster.
kip714 has no ACLs; it keeps Kafka's ``super.users`` rule: with a ``[security]``
section only the principals listed in ``super_users`` may alter or manage
credentials, everybody may read; with no ``[security]`` section every
principal may (as a Kafka broker without an authorizer).

The HTTP routes carry no Kafka principal that could be a super user, so they
are guarded by bearer tokens: ``[admin] token`` for the HTTP admin API (or,
without one, only a loopback-bound HTTP listener serves it) and
``[forward] token`` for the broker plugin's forward route (no token: off).
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from telemetry.kafka.connection import ConnectionState

__all__ = [
    "CLUSTER_AUTHORIZATION_FAILED_MESSAGE",
    "Authorizer",
    "Refusal",
    "is_loopback",
    "principal_of",
]

#: Kafka's ``ClusterAuthorizationException`` default message.
CLUSTER_AUTHORIZATION_FAILED_MESSAGE: Final = "Cluster authorization failed."


def principal_of(state: ConnectionState) -> str:
    """``User:<name>``: the principal of a Kafka connection, as the quota entity names it."""
    return f"User:{state.entity.user}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP request refused: its status and why."""

    status: int
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Authorizer:
    """``super_users`` None: no ``[security]`` section, every principal may alter."""

    super_users: frozenset[str] | None = None
    #: ``[admin] token``; without one, the HTTP admin API needs a loopback listener.
    admin_token: str | None = None
    admin_loopback: bool = False
    #: ``[forward] token``; None disables the forward route.
    forward_token: str | None = None

    def may_alter(self, principal: str) -> bool:
        """Alter client-metrics subscriptions and client quotas (ALTER_CONFIGS on the cluster)."""
        return self.super_users is None or principal in self.super_users

    def may_describe(self, principal: str) -> bool:
        return True

    def may_manage_credentials(self, principal: str) -> bool:
        """Describe or alter SCRAM credentials: the super users, as for a change."""
        return self.may_alter(principal)

    def http_admin_refusal(self, authorization: str) -> Refusal | None:
        """None when the HTTP admin API may serve a request with this Authorization header."""
        if self.admin_token is not None:
            expected = f"Bearer {self.admin_token}"
            if not hmac.compare_digest(authorization.encode(), expected.encode()):
                return Refusal(401, "the admin API needs Authorization: Bearer <[admin] token>")
            return None
        if not self.admin_loopback:
            return Refusal(
                403, "the admin API is off: set [admin] token, or listen on loopback only"
            )
        return None

    def forward_refusal(self, authorization: str) -> Refusal | None:
        """None when a broker presenting this Authorization header may forward pushes."""
        if self.forward_token is None:
            return Refusal(403, "forwarding is disabled: set forward.token")
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            presented.strip().encode("utf-8"), self.forward_token.encode("utf-8")
        ):
            return Refusal(401, "a valid bearer token is required")
        return None
