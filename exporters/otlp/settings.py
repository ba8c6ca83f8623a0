"""The ``otlp`` exporter's options, checked once when the factory is called."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from exporters.options import check_keys, int_option, number_option

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["OtlpSettings"]

_DEFAULTS: Final[dict[str, Any]] = {
    "headers": {},
    "compression": "gzip",
    "timeout_s": 10.0,
    "batch_max_bytes": 1024 * 1024,
    "batch_timeout_ms": 200,
    "max_pending_bytes": 16 * 1024 * 1024,
    "max_in_flight": 2,
    "retry_initial_ms": 100,
    "retry_max_ms": 5000,
}
_KEYS: Final = frozenset({"endpoint", *_DEFAULTS})
# Headers the exporter sets itself; overriding them would corrupt the request.
_RESERVED_HEADERS: Final = frozenset({"content-type", "content-encoding", "content-length"})


@dataclass(frozen=True, slots=True)
class OtlpSettings:
    """Where to send, and how much may wait or travel at once.

    Attributes:
        endpoint: The full URL of the OTLP/HTTP metrics endpoint (``.../v1/metrics``).
        headers: Extra request headers (authentication).
        compression: ``gzip`` (the default) or ``none``.
        timeout_s: One request's time limit.
        batch_max_bytes: A request's uncompressed body stops growing at this size.
        batch_timeout_ms: A push waits at most this long for others to share its request.
        max_pending_bytes: Encoded pushes held (waiting or in flight) before
            ``export`` waits for room; this is the bound on memory.
        max_in_flight: Requests sent concurrently.
        retry_initial_ms, retry_max_ms: The exponential backoff between attempts
            (``Retry-After`` takes precedence when the backend sends one).
    """

    endpoint: str
    headers: tuple[tuple[str, str], ...]
    compression: str
    timeout_s: float
    batch_max_bytes: int
    batch_timeout_ms: int
    max_pending_bytes: int
    max_in_flight: int
    retry_initial_ms: int
    retry_max_ms: int

    @classmethod
    def from_options(cls, config: Mapping[str, Any]) -> OtlpSettings:
        """Raises ``TypeError`` (unknown or missing option) or ``ValueError`` (bad value)."""
        check_keys(config, _KEYS, "otlp")
        if "endpoint" not in config:
            raise TypeError("missing required option 'endpoint' for the otlp exporter")
        options = {**_DEFAULTS, **config}
        settings = cls(
            endpoint=_endpoint(options["endpoint"]),
            headers=_headers(options["headers"]),
            compression=_compression(options["compression"]),
            timeout_s=number_option(options, "timeout_s", 0.001),
            batch_max_bytes=int_option(options, "batch_max_bytes", 1),
            batch_timeout_ms=int_option(options, "batch_timeout_ms", 0),
            max_pending_bytes=int_option(options, "max_pending_bytes", 1),
            max_in_flight=int_option(options, "max_in_flight", 1, 64),
            retry_initial_ms=int_option(options, "retry_initial_ms", 1),
            retry_max_ms=int_option(options, "retry_max_ms", 1),
        )
        if settings.retry_max_ms < settings.retry_initial_ms:
            raise ValueError(
                f"option 'retry_max_ms' must be at least retry_initial_ms "
                f"({settings.retry_initial_ms}): {settings.retry_max_ms!r}"
            )
        return settings


def _endpoint(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"option 'endpoint' must be an http(s) URL: {value!r}")
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError(f"option 'endpoint' must be an http(s) URL: {value!r}")
    return value


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"option 'headers' must be a table of strings: {value!r}")
    reserved = sorted(k for k in value if k.lower() in _RESERVED_HEADERS)
    if reserved:
        raise ValueError(f"option 'headers' may not set {reserved[0]!r}: the exporter does")
    return tuple(sorted(value.items()))


def _compression(value: Any) -> str:
    if value not in {"gzip", "none"}:
        raise ValueError(f"option 'compression' must be 'gzip' or 'none': {value!r}")
    return str(value)
