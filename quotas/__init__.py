"""Kafka's quota machinery as a pure library.

No I/O, no asyncio, no clock: every call takes ``now_ms``, so every rule is
deterministic and testable to the millisecond. Names follow Kafka's
(``org.apache.kafka.common.metrics``, ``kafka.server.*QuotaManager``,
``SocketServer.ConnectionQuotas``) so the Java code stays a map to this one.
"""

from __future__ import annotations

from quotas.client_quota_manager import (
    INACTIVE_SENSOR_EXPIRATION_MS,
    ClientQuotaManager,
    ClientSensors,
    QuotaType,
)
from quotas.config import MAX_DOUBLE, UNLIMITED, MetricConfig, Quota, TimeUnit
from quotas.connection_quotas import ConnectionQuotas
from quotas.entity import DEFAULT, QuotaEntity, QuotaTypes, sanitize
from quotas.errors import (
    ConnectionThrottledError,
    InvalidQuotaConfigError,
    QuotaError,
    ThrottlingQuotaExceededError,
    TooManyConnectionsError,
)
from quotas.metric_name import MetricName
from quotas.mutation_quota import (
    UNBOUNDED_CONTROLLER_MUTATION_QUOTA,
    ControllerMutationQuota,
    ControllerMutationQuotaManager,
    PermissiveControllerMutationQuota,
    StrictControllerMutationQuota,
)
from quotas.proposal import BudgetSplit, headroom_quotas, split_budget
from quotas.registry import Metrics
from quotas.replay import DemandEvent, ReplayResult, replay
from quotas.request_quota_manager import (
    NANOS_TO_PERCENTAGE_PER_SECOND,
    RequestQuotaManager,
    nanos_to_percentage,
)
from quotas.sensor import Metric, Sensor
from quotas.stats import (
    Avg,
    CumulativeSum,
    Max,
    MeasurableStat,
    Min,
    QuotaViolationError,
    Rate,
    SampledStat,
    WindowedCount,
    WindowedSum,
)
from quotas.throttle import (
    bounded_throttle_time_ms,
    java_round,
    throttle_time_ms,
    token_bucket_throttle_time_ms,
)
from quotas.token_bucket import TokenBucket

__all__ = [
    "DEFAULT",
    "INACTIVE_SENSOR_EXPIRATION_MS",
    "MAX_DOUBLE",
    "NANOS_TO_PERCENTAGE_PER_SECOND",
    "UNBOUNDED_CONTROLLER_MUTATION_QUOTA",
    "UNLIMITED",
    "Avg",
    "BudgetSplit",
    "ClientQuotaManager",
    "ClientSensors",
    "ConnectionQuotas",
    "ConnectionThrottledError",
    "ControllerMutationQuota",
    "ControllerMutationQuotaManager",
    "CumulativeSum",
    "DemandEvent",
    "InvalidQuotaConfigError",
    "Max",
    "MeasurableStat",
    "Metric",
    "MetricConfig",
    "MetricName",
    "Metrics",
    "Min",
    "PermissiveControllerMutationQuota",
    "Quota",
    "QuotaEntity",
    "QuotaError",
    "QuotaType",
    "QuotaTypes",
    "QuotaViolationError",
    "Rate",
    "ReplayResult",
    "RequestQuotaManager",
    "SampledStat",
    "Sensor",
    "StrictControllerMutationQuota",
    "ThrottlingQuotaExceededError",
    "TimeUnit",
    "TokenBucket",
    "TooManyConnectionsError",
    "WindowedCount",
    "WindowedSum",
    "bounded_throttle_time_ms",
    "headroom_quotas",
    "java_round",
    "nanos_to_percentage",
    "replay",
    "sanitize",
    "split_budget",
    "throttle_time_ms",
    "token_bucket_throttle_time_ms",
]
