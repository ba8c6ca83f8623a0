"""What the HTTP ingestion routes share: the manager, the log, the clock, the client quotas."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from telemetry.enforcement import ClientQuotas, QuotaSettings, Refusals
from telemetry.http.settings import DEFAULT_DECODE_THREADS
from telemetry.http.throttle import HttpQuotas
from telemetry.ingress import wall_clock_ms

if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Executor

    from telemetry.core.manager import TelemetryManager
    from telemetry.http.decoding import FairDecoder
    from telemetry.http.identity import IdentityCache
    from telemetry.http.memory import HttpRequestMemory
    from telemetry.ingress import PushLog

__all__ = ["HttpIngest", "HttpIngestStats"]


@dataclass(slots=True)
class HttpIngestStats:
    """Responses per route and HTTP status, and the OTLP route's identity cache and decoding
    threads, for /metrics."""

    responses: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: Set by the OTLP route: its bytes and entries are read at scrape time.
    identity_cache: IdentityCache | None = None
    #: Set by the OTLP route: the bodies waiting for a decoding thread, read at scrape time.
    decoder: FairDecoder | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpIngest:
    """The parts every ingestion route uses; the same ones the Kafka listener is built on.

    ``clock`` is wall-clock milliseconds (push gates, landed receive times
    and quota windows use wall time, as Kafka does); tests inject a manual
    one. ``quotas`` wraps the server's
    :class:`~telemetry.enforcement.ClientQuotas` (by default: none configured).
    """

    manager: TelemetryManager
    log: PushLog
    clock: Callable[[], int] = wall_clock_ms
    quotas: HttpQuotas = field(default_factory=lambda: HttpQuotas(ClientQuotas(QuotaSettings())))
    stats: HttpIngestStats = field(default_factory=HttpIngestStats)
    #: Where pushes expanding past the inline limit are decompressed (the Kafka
    #: listener's threads in the server); ``None``: the loop's default executor.
    decompressor: Executor | None = None
    #: The shared request-memory pool, as HTTP requests take from it; ``None``: unbounded.
    memory: HttpRequestMemory | None = None
    #: Where the routes count the requests their bounds refuse (the server's, on /metrics).
    refusals: Refusals = field(default_factory=Refusals)
    #: ``[http] decode_threads``: the OTLP route's decoding threads.
    decode_threads: int = DEFAULT_DECODE_THREADS
