"""The ``[telemetry]`` settings of the KIP-714 manager.

``max_bytes`` is Kafka's ``telemetry.max.bytes`` (the limit on the payload as
sent, advertised to clients as TelemetryMaxBytes). Kafka 4.3.1+ reuses that
same number to bound the decompressed size; kip714 keeps a separate
``max_decompressed_bytes`` because OTLP compresses well (5–10× for
librdkafka payloads), so a payload that fits the wire limit would otherwise
be refused after decompression. The default of 16 MiB leaves room for a
full 1 MiB push at 16× and still bounds the memory one push can take.

The OTLP door's bounds live here too, as ``[telemetry]`` keys: an OTLP
request's resources, each resource's scopes, a resource's encoded size, a
resource attribute's encoded key or value, and the bytes of the identities
it caches (telemetry.http.otlp_wire, telemetry.http.identity). An empty
``ResourceMetrics`` encodes to 2 bytes, so ``max_decompressed_bytes`` alone
lets one request carry millions of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from telemetry import toml_checks as toml
from telemetry.core.subscriptions import Subscription, validate_subscription
from telemetry.errors import ConfigError, TelemetryError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_INSTANCE_CACHE_EXPIRY_MS",
    "DEFAULT_INSTANCE_CACHE_SIZE",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "OTLP_LIMIT_KEYS",
    "TelemetryConfig",
]

DEFAULT_MAX_BYTES: Final = 1_048_576
DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 16 * 1_048_576
DEFAULT_INSTANCE_CACHE_SIZE: Final = 16_384
DEFAULT_INSTANCE_CACHE_EXPIRY_MS: Final = 60_000
_INT32_MAX: Final = 2**31 - 1
#: The OTLP door's ``[telemetry]`` keys, each the reason its refusals are counted under.
OTLP_LIMIT_KEYS: Final = (
    "max_resources_per_request",
    "max_scopes_per_resource",
    "max_resource_bytes",
    "max_attribute_value_bytes",
    "identity_cache_max_bytes",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryConfig:
    """Limits of the telemetry manager; each refusal names the ``telemetry.*`` key."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    instance_cache_size: int = DEFAULT_INSTANCE_CACHE_SIZE
    instance_cache_expiry_ms: int = DEFAULT_INSTANCE_CACHE_EXPIRY_MS
    #: OTLP: more ``ResourceMetrics`` in one request are refused (400) at the first one over.
    max_resources_per_request: int = 1000
    #: OTLP: more ``ScopeMetrics`` in one ``ResourceMetrics`` are refused (400).
    max_scopes_per_resource: int = 1000
    #: OTLP: a ``Resource`` encoding (its parts merged) longer than this is refused (400).
    max_resource_bytes: int = 64 * 1024
    #: OTLP: a resource attribute whose encoded key or value is longer is refused (400).
    max_attribute_value_bytes: int = 16 * 1024
    #: OTLP: the derived identities cached hold at most this many bytes (least recent go).
    identity_cache_max_bytes: int = 64 * 1_048_576

    def __post_init__(self) -> None:
        # max_bytes travels as the int32 TelemetryMaxBytes; Kafka's atLeast(1).
        _check_int("telemetry.max_bytes", self.max_bytes, 1, _INT32_MAX)
        _check_int("telemetry.max_decompressed_bytes", self.max_decompressed_bytes, 1, 2**63 - 1)
        if self.max_decompressed_bytes < self.max_bytes:
            # An uncompressed push of max_bytes is accepted, so the same data
            # compressed must be too.
            raise ConfigError(
                "telemetry.max_decompressed_bytes",
                self.max_decompressed_bytes,
                f"must be at least telemetry.max_bytes ({self.max_bytes})",
            )
        _check_int("telemetry.instance_cache_size", self.instance_cache_size, 1, 2**31 - 1)
        _check_int(
            "telemetry.instance_cache_expiry_ms", self.instance_cache_expiry_ms, 1, _INT32_MAX
        )
        for key in OTLP_LIMIT_KEYS:
            _check_int(f"telemetry.{key}", getattr(self, key), 1, _INT32_MAX)


def _check_int(key: str, value: object, minimum: int, maximum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(key, value, "must be an integer")
    if not minimum <= value <= maximum:
        raise ConfigError(key, value, f"must be between {minimum} and {maximum}")


def parse_telemetry(section: Mapping[str, Any]) -> TelemetryConfig:
    values = {key: toml.integer(f"telemetry.{key}", value, None) for key, value in section.items()}
    return TelemetryConfig(**values)


def parse_subscriptions(table: Mapping[str, Any]) -> tuple[Subscription, ...]:
    subscriptions = []
    for name, properties in table.items():
        key = f"subscriptions.{name}"
        if not isinstance(properties, dict):
            raise ConfigError(key, properties, "expected a table of metrics, interval.ms, match")
        try:
            subscription = validate_subscription(name, properties)
        except TelemetryError as error:
            raise ConfigError(key, dict(properties), str(error)) from None
        if subscription is None:
            raise ConfigError(key, {}, "an empty subscription subscribes to nothing")
        subscriptions.append(subscription)
    return tuple(subscriptions)
