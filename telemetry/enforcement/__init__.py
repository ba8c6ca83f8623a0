"""Kafka's quota enforcement for any listener: who may connect, read, and how fast.

Built on the pure ``quotas`` library, transport-independent: every call
takes the entity (user principal, client id) or the address and ``now_ms``,
and returns a decision (a throttle time, an admission) that the listener
applies its own way — the Kafka listener mutes its channel (KIP-219) or
closes the connection; an HTTP listener answers 429 with ``Retry-After``.
Depends on ``quotas`` and ``telemetry.errors`` only.
"""

from __future__ import annotations

from telemetry.enforcement.client_quotas import ClientQuotas, EntitySensors, Throttle
from telemetry.enforcement.connection_limits import Admission, AdmissionOutcome, ConnectionLimits
from telemetry.enforcement.enforcer import Enforcement
from telemetry.enforcement.entity import ClientEntity
from telemetry.enforcement.refusals import RateLimitedLog, Refusals
from telemetry.enforcement.request_memory import (
    READ_BYTES,
    MemoryClient,
    PendingClient,
    RequestMemoryPool,
)
from telemetry.enforcement.settings import (
    ANONYMOUS_USER,
    ClientQuotaSettings,
    IpQuotaSettings,
    LimitSettings,
    QuotaSettings,
    parse_limits,
    parse_quotas,
)
from telemetry.enforcement.throttles import ThrottleReason, ThrottleTracker

__all__ = [
    "ANONYMOUS_USER",
    "READ_BYTES",
    "Admission",
    "AdmissionOutcome",
    "ClientEntity",
    "ClientQuotaSettings",
    "ClientQuotas",
    "ConnectionLimits",
    "Enforcement",
    "EntitySensors",
    "IpQuotaSettings",
    "LimitSettings",
    "MemoryClient",
    "PendingClient",
    "QuotaSettings",
    "RateLimitedLog",
    "Refusals",
    "RequestMemoryPool",
    "Throttle",
    "ThrottleReason",
    "ThrottleTracker",
    "parse_limits",
    "parse_quotas",
]
