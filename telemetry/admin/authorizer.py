"""Who may do what: the one authorizer every door asks.

Kafka authorises reads of client-metrics subscriptions and client quotas with
DESCRIBE_CONFIGS on the cluster and changes with ALTER_CONFIGS on the cluster
(``ControllerApis.authorizeAlterResource``, ``KafkaApis.handleAlterClientQuotas``),
and SCRAM credentials (KIP-554) with DESCRIBE/ALTER on the cluster.
kip714 has no ACLs; it keeps Kafka's ``super.users`` rule: with a ``[security]``
section only the principals listed in ``super_users`` may alter or manage
credentials, everybody may read; with no ``[security]`` section every
principal may (as a Kafka broker without an authorizer).

The HTTP admin API is guarded by ``[admin] token`` (``Authorization:
Bearer``) or, with ``[security]``, a verified client certificate whose
principal is a super user; with neither a token nor ``[security]`` only a
loopback-bound HTTP listener serves it. A request not carried by the token
must also pass the browser rules of :mod:`telemetry.admin.http_guard`
(Origin, Host, Content-Type). The broker plugin's forward route is guarded by
``[forward] token`` (no token: off).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from telemetry.admin.http_guard import Refusal, browser_refusal, is_loopback_name
from telemetry.http.principal import principal, request_user

if TYPE_CHECKING:
    from aiohttp import web

    from telemetry.admin.settings import AdminSettings
    from telemetry.kafka.connection_state import ConnectionState

__all__ = [
    "CLUSTER_AUTHORIZATION_FAILED_MESSAGE",
    "THROTTLED_MESSAGE",
    "Authorizer",
    "Refusal",
    "is_loopback",
    "principal_of",
]

#: Kafka's ``ClusterAuthorizationException`` default message.
CLUSTER_AUTHORIZATION_FAILED_MESSAGE: Final = "Cluster authorization failed."
#: Kafka's ``ThrottlingQuotaExceededException`` message: a change past ``controller_mutation_rate``.
THROTTLED_MESSAGE: Final = "The throttling quota has been exceeded."


def principal_of(state: ConnectionState) -> str:
    """``User:<name>``: the principal of a Kafka connection, as the quota entity names it."""
    return f"User:{state.entity.user}"


#: ``localhost``, a ``*.localhost`` name (RFC 6761) or a loopback address.
is_loopback = is_loopback_name


@dataclass(frozen=True, slots=True, kw_only=True)
class Authorizer:
    """``super_users`` None: no ``[security]`` section, every principal may alter."""

    super_users: frozenset[str] | None = None
    #: ``[admin] token``; without one, the HTTP admin API needs a loopback listener.
    admin_token: str | None = None
    admin_loopback: bool = False
    #: ``[admin] allowed_hosts``: Host names a request without the token may name.
    admin_allowed_hosts: frozenset[str] = frozenset()
    #: ``[forward] token``; None disables the forward route.
    forward_token: str | None = None

    @classmethod
    def from_settings(
        cls, admin: AdminSettings, *, http_host: str, forward_token: str | None = None
    ) -> Authorizer:
        """The server's authorizer: ``[admin]``, ``[security]`` and ``[forward] token``."""
        return cls(
            super_users=admin.super_users,
            admin_token=admin.token,
            admin_loopback=is_loopback(http_host),
            admin_allowed_hosts=admin.allowed_hosts,
            forward_token=forward_token,
        )

    def may_alter(self, principal: str) -> bool:
        """Alter client-metrics subscriptions and client quotas (ALTER_CONFIGS on the cluster)."""
        return self.super_users is None or principal in self.super_users

    def may_describe(self, principal: str) -> bool:
        return True

    def may_manage_credentials(self, principal: str) -> bool:
        """Describe or alter SCRAM credentials: the super users, as for a change."""
        return self.may_alter(principal)

    def http_admin_refusal(
        self, authorization: str, principal: str | None = None
    ) -> Refusal | None:
        """None when a caller presenting this Authorization header (and, with a verified
        client certificate, this principal) may use the HTTP admin API."""
        bearer = self._admin_bearer(authorization)
        if self.super_users is not None:
            if not bearer and principal not in self.super_users:
                return Refusal(
                    401,
                    "the admin API needs Authorization: Bearer <[admin] token> or a client "
                    "certificate whose principal is in [security] super_users",
                )
        elif self.admin_token is not None:
            if not bearer:
                return Refusal(401, "the admin API needs Authorization: Bearer <[admin] token>")
        elif not self.admin_loopback:
            return Refusal(
                403, "the admin API is off: set [admin] token, or listen on loopback only"
            )
        return None

    def http_admin_request_refusal(self, request: web.Request) -> Refusal | None:
        """:meth:`http_admin_refusal`, then the browser rules for a request without the token."""
        authorization = request.headers.get("Authorization", "")
        refusal = self.http_admin_refusal(authorization, principal(request_user(request)))
        if refusal is not None or self._admin_bearer(authorization):
            return refusal
        return browser_refusal(request, self.admin_allowed_hosts)

    def _admin_bearer(self, authorization: str) -> bool:
        if self.admin_token is None:
            return False
        expected = f"Bearer {self.admin_token}"
        return hmac.compare_digest(authorization.encode(), expected.encode())

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
