"""Exceptions of the ingest log.

IngestLogError
 ├── LogClosedError          the log was closed; nothing more is accepted
 ├── LogFailedError          a write or fsync failed; reopen to recover
 ├── LogFullError            disk budget exhausted (also a Kafka
 │                           THROTTLING_QUOTA_EXCEEDED, with throttle time)
 ├── RecordTooLargeError     one record is over the configured limit
 ├── OffsetOutOfRangeError   below the log start or past its durable end
 └── LogCorruptionError      an acknowledged record fails its checks
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from telemetry.errors import ThrottlingQuotaExceededError

if TYPE_CHECKING:
    from pathlib import Path


class IngestLogError(Exception):
    """Base of the ingest log's errors."""


class LogClosedError(IngestLogError):
    """The log is closed or closing."""


class LogFailedError(IngestLogError):
    """A write or fsync failed, so the log refuses further appends.

    After a failed fsync the kernel may already have dropped the dirty pages
    and cleared the error, so retrying could report success for data that is
    not on disk. The only safe continuation is to reopen the log, whose
    recovery re-establishes what is really there.
    """


class LogFullError(ThrottlingQuotaExceededError, IngestLogError):
    """The disk budget has no room for the record: exporters are behind.

    Subclasses the Kafka error so the listeners answer it as
    THROTTLING_QUOTA_EXCEEDED with ``throttle_time_ms`` without special cases.
    """

    def __init__(self, throttle_time_ms: int, reason: str, bound: str = "max_bytes") -> None:
        super().__init__(reason)
        self.throttle_time_ms = throttle_time_ms
        self.reason = reason
        #: The ``[log]`` key of the budget that refused it (``kip714_requests_refused_total``).
        self.bound = bound


class RecordTooLargeError(IngestLogError, ValueError):
    """A single record larger than ``LogConfig.max_record_bytes``."""


class OffsetOutOfRangeError(IngestLogError, ValueError):
    """An offset outside ``[log_start, log_end]``."""

    def __init__(self, offset: int, log_start: int, log_end: int) -> None:
        super().__init__(f"offset {offset} is outside the log's range [{log_start}, {log_end}]")
        self.offset = offset
        self.log_start = log_start
        self.log_end = log_end


class LogCorruptionError(IngestLogError):
    """A record below the durable end fails its length or CRC check.

    Only storage damage (or an outside edit) can cause this: the writer
    acknowledged the record after fsync. Readers stop here rather than skip,
    because skipping would silently lose acknowledged data; an operator may
    decide to move a consumer past it, to ``next_readable_offset`` (the base
    of the next segment, ``None`` if the damage is in the last one).
    """

    def __init__(
        self, path: Path, position: int, offset: int, reason: str, next_readable_offset: int | None
    ) -> None:
        super().__init__(f"{path}: byte {position} (offset {offset}): {reason}")
        self.path = path
        self.position = position
        self.offset = offset
        self.reason = reason
        self.next_readable_offset = next_readable_offset
