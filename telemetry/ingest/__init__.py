"""The durable ingest log: every accepted push is appended here before it is acknowledged.

Its own segment-file format (see ``record.py`` and ``docs/architecture.md``),
group-committed fsyncs, per-consumer committed positions that exporters resume
from, retention by consumer position, and a disk budget that turns into
THROTTLING_QUOTA_EXCEEDED when exporters fall behind. Payloads are kept as
the client sent them and decompressed on read. Depends on the standard
library, ``crc32c``, ``exporters.api``, ``telemetry.core.codecs`` and
``telemetry.errors``.
"""

from __future__ import annotations

from telemetry.ingest.config import LogConfig
from telemetry.ingest.errors import (
    IngestLogError,
    LogClosedError,
    LogCorruptionError,
    LogFailedError,
    LogFullError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from telemetry.ingest.log import IngestLog
from telemetry.ingest.record import PushContext
from telemetry.ingest.stats import FSYNC_BUCKETS_S, LogStats

__all__ = [
    "FSYNC_BUCKETS_S",
    "IngestLog",
    "IngestLogError",
    "LogClosedError",
    "LogConfig",
    "LogCorruptionError",
    "LogFailedError",
    "LogFullError",
    "LogStats",
    "OffsetOutOfRangeError",
    "PushContext",
    "RecordTooLargeError",
]
