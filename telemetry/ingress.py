"""How every front door finishes an accepted push, so each answers it the same way.

The Kafka listener and the HTTP routes both hand an accepted push to the
ingest log and, for a large payload, a decompression to a thread; what the
client is told when either goes wrong is decided here, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Final, Protocol

from telemetry.errors import ErrorCode, TelemetryError, ThrottlingQuotaExceededError
from telemetry.ingest import LogFullError, RecordTooLargeError

if TYPE_CHECKING:
    from telemetry.core.manager import AcceptedPush, PushTelemetryResponse, TelemetryManager
    from telemetry.ingest import PushContext

__all__ = [
    "DECOMPRESSION_NICENESS",
    "DECOMPRESSION_THREADS",
    "INLINE_DECOMPRESSED_BYTES",
    "RETRY_LATER_MS",
    "PushLog",
    "complete_failed_append",
    "decompression_outcome",
    "lower_thread_priority",
    "wall_clock_ms",
]

_log = logging.getLogger(__name__)

#: The throttle of a push the log could not take for a reason other than room.
RETRY_LATER_MS = 1000

#: Decompressed output produced on the event loop (≈0.1–0.5 ms of zstd or
#: gzip); a payload expanding further goes to the decompression threads.
#: librdkafka's pushes are 1.5–3 KiB decompressed.
INLINE_DECOMPRESSED_BYTES: Final = 256 * 1024
#: Threads for large decompressions. Each holds at most one output of
#: ``max_decompressed_bytes``; waiting pushes hold only their compressed bytes
#: (one per connection, since a connection answers one request at a time).
#: One thread: large pushes are the exception, and a second would let them
#: take every core of a small machine from the event loop.
DECOMPRESSION_THREADS: Final = 1
#: Scheduling niceness of the decompression threads (Linux schedules threads
#: individually): under contention the event loop, answering everybody's
#: small pushes, gets the CPU first.
DECOMPRESSION_NICENESS: Final = 10


def wall_clock_ms() -> int:
    """Kafka's ``time.milliseconds()``: the push gates and the landing use wall time."""
    return time.time_ns() // 1_000_000


class PushLog(Protocol):
    """Where accepted pushes go before they are acknowledged (the ingest log)."""

    def append_nowait(
        self, context: PushContext, payload: bytes
    ) -> tuple[int, asyncio.Future[None]]: ...


def lower_thread_priority() -> None:
    """Runs first in each decompression thread: nice only this thread (Linux), if allowed."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), DECOMPRESSION_NICENESS)


def complete_failed_append(
    manager: TelemetryManager, accepted: AcceptedPush, error: BaseException
) -> PushTelemetryResponse:
    """Complete a push the log refused or failed; the error code tells the client when to retry.

    A full log is THROTTLING_QUOTA_EXCEEDED with the log's throttle time; a
    record over the log's limit is TELEMETRY_TOO_LARGE; anything else is 89
    with 1 s, retryable for every client (87 would switch their telemetry off).
    """
    if isinstance(error, LogFullError):
        _log.warning("refusing a push: %s", error.reason)
        return manager.complete_push(
            accepted, ErrorCode.THROTTLING_QUOTA_EXCEEDED, throttle_time_ms=error.throttle_time_ms
        )
    if isinstance(error, RecordTooLargeError):
        return manager.complete_push(accepted, ErrorCode.TELEMETRY_TOO_LARGE)
    _log.error("the ingest log could not take a push: %r", error)
    return manager.complete_push(
        accepted, ErrorCode.THROTTLING_QUOTA_EXCEEDED, throttle_time_ms=RETRY_LATER_MS
    )


def decompression_outcome(future: asyncio.Future[bytes | TelemetryError]) -> bytes | TelemetryError:
    """What a finished decompression thread means for its push.

    Codec refusals come back as values (``DeferredPush.outcome``); a
    cancelled future (the server stopping) or an exception (a bug, a
    MemoryError) is logged here, once, and answered as retryable.
    """
    if future.cancelled():
        return ThrottlingQuotaExceededError("the server is stopping")
    error = future.exception()
    if error is not None:
        _log.error("decompressing a push failed", exc_info=error)
        return ThrottlingQuotaExceededError(f"decompression failed: {error}")
    return future.result()
