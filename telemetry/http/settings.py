"""The HTTP door's settings: ``[http]``'s timeouts and ``[forward]``, the broker plugin's route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from telemetry import toml_checks as toml
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The plugin's batches are 4 MiB by default; a single push may be larger.
DEFAULT_MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024


#: ``[http]`` keys this module parses (``listen`` and ``tls`` belong to the server and security).
HTTP_LIMIT_KEYS: Final = frozenset(
    {"header_timeout_ms", "body_timeout_ms", "memory_wait_ms", "metrics_auth", "decode_threads"}
)
#: ``[http] metrics_auth``: who may read ``/metrics``.
METRICS_AUTH_VALUES: Final = ("none", "admin")
#: ``[http] decode_threads``: the OTLP route's decoding threads (telemetry.http.decoding).
DEFAULT_DECODE_THREADS: Final = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpLimits:
    """``[http]``: how long a request's headers and body may take (telemetry.http.connections),
    how long a request waits for request memory before a 503 (telemetry.http.memory), how
    many threads decode OTLP bodies, senders served in turn (telemetry.http.decoding), and
    who may read ``/metrics``."""

    header_timeout_ms: int = 10_000
    body_timeout_ms: int = 60_000
    memory_wait_ms: int = 5_000
    #: ``"none"``: ``/metrics`` is open; ``"admin"``: it needs what the HTTP admin API needs.
    metrics_auth: str = "none"
    decode_threads: int = DEFAULT_DECODE_THREADS


def parse_http_limits(section: Mapping[str, Any]) -> HttpLimits:
    metrics_auth = toml.string("http.metrics_auth", section.get("metrics_auth", "none"))
    if metrics_auth not in METRICS_AUTH_VALUES:
        raise ConfigError(
            "http.metrics_auth", metrics_auth, f"expected one of {', '.join(METRICS_AUTH_VALUES)}"
        )
    return HttpLimits(
        metrics_auth=metrics_auth,
        header_timeout_ms=toml.integer(
            "http.header_timeout_ms", section.get("header_timeout_ms", 10_000), 1
        ),
        body_timeout_ms=toml.integer(
            "http.body_timeout_ms", section.get("body_timeout_ms", 60_000), 1
        ),
        memory_wait_ms=toml.integer("http.memory_wait_ms", section.get("memory_wait_ms", 5_000), 0),
        decode_threads=toml.integer(
            "http.decode_threads", section.get("decode_threads", DEFAULT_DECODE_THREADS), 1, 64
        ),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardSettings:
    """``[forward]``: the token brokers present, and the largest request taken.

    ``token`` ``None`` disables the route (403): an open forward endpoint
    would let anyone write data that claims to come from the cluster.
    """

    token: str | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES


def parse_forward(section: Mapping[str, Any]) -> ForwardSettings:
    token = section.get("token")
    return ForwardSettings(
        token=None if token is None else toml.string("forward.token", token),
        max_request_bytes=toml.integer(
            "forward.max_request_bytes",
            section.get("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES),
            1024,
        ),
    )
