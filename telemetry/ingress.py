"""How every front door finishes an accepted push, so each answers it the same way.

The Kafka listener and the HTTP routes both hand an accepted push to the
ingest log and, for a large payload, a decompression to a thread; what the
client is told when either goes wrong is decided here, once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from telemetry.errors import ErrorCode, TelemetryError, ThrottlingQuotaExceededError
from telemetry.ingest import LogFullError, RecordTooLargeError

if TYPE_CHECKING:
    from telemetry.core.manager import AcceptedPush, PushTelemetryResponse, TelemetryManager

__all__ = ["RETRY_LATER_MS", "complete_failed_append", "decompression_outcome"]

_log = logging.getLogger(__name__)

#: The throttle of a push the log could not take for a reason other than room.
RETRY_LATER_MS = 1000


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
