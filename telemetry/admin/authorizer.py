"""Who may change the admin plane: the one decision, shared by every front door.

Kafka authorises reads of client-metrics subscriptions and client quotas with
DESCRIBE_CONFIGS on the cluster and changes with ALTER_CONFIGS on the cluster
(``ControllerApis.authorizeAlterResource``, ``KafkaApis.handleAlterClientQuotas``).
kip714 has no ACLs; it keeps Kafka's ``super.users`` rule: with a ``[security]``
section only the principals listed in ``super_users`` may alter, everybody may
read; with no ``[security]`` section every principal may read and alter (as a
Kafka broker without an authorizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from telemetry.kafka_connection import ConnectionState

#: Kafka's ``ClusterAuthorizationException`` default message.
CLUSTER_AUTHORIZATION_FAILED_MESSAGE: Final = "Cluster authorization failed."
#: Kafka's ``ThrottlingQuotaExceededException`` message: a change past ``controller_mutation_rate``.
THROTTLED_MESSAGE: Final = "The throttling quota has been exceeded."


def principal_of(state: ConnectionState) -> str:
    """``User:<name>``: the principal of a Kafka connection, as the quota entity names it."""
    return f"User:{state.entity.user}"


@dataclass(frozen=True, slots=True)
class AdminAuthorizer:
    """``super_users`` None: no ``[security]`` section, every principal may alter."""

    super_users: frozenset[str] | None = None

    def may_alter(self, principal: str) -> bool:
        return self.super_users is None or principal in self.super_users

    def may_describe(self, principal: str) -> bool:
        return True
