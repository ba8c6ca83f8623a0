"""Sizes and limits of an ingest log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from telemetry import toml_checks as toml
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """Sizes and limits of one ingest log.

    Attributes:
        segment_bytes: Roll to a new segment once the active one would exceed
            this. Retention deletes whole segments, so this is also the
            granularity at which consumed data leaves the disk.
        max_bytes: The disk budget: bytes the log's segments may occupy,
            counting records still being written. At least two segments, so
            that consumers that have caught up always leave room to append.
        max_record_bytes: The largest single frame accepted.
        full_throttle_ms: Throttle time suggested to clients refused because
            the budget is exhausted; exporters need time to catch up and the
            log cannot predict how long, so this is a fixed, tunable value.
        max_pending_decoded_bytes: The budget of work not yet done: the
            decoded (decompressed) size of records not yet consumed by every
            exporter. A push beyond it is refused as when the disk budget is
            exhausted (THROTTLING_QUOTA_EXCEEDED / 503): a small compressed
            push can decode to millions of data points, which the disk
            budget, counting bytes as sent, does not see.
    """

    segment_bytes: int = 64 * _MIB
    max_bytes: int = 1024 * _MIB
    max_record_bytes: int = 16 * _MIB
    full_throttle_ms: int = 1000
    max_pending_decoded_bytes: int = 4096 * _MIB

    def __post_init__(self) -> None:
        if self.segment_bytes <= 0:
            raise ValueError(f"segment_bytes must be positive, got {self.segment_bytes}")
        if self.max_bytes < 2 * self.segment_bytes:
            raise ValueError(
                f"max_bytes ({self.max_bytes}) must be at least twice segment_bytes "
                f"({self.segment_bytes})"
            )
        if self.max_record_bytes <= 0 or self.full_throttle_ms < 0:
            raise ValueError("max_record_bytes must be positive and full_throttle_ms >= 0")
        if self.max_pending_decoded_bytes < self.max_record_bytes:
            raise ValueError(
                f"max_pending_decoded_bytes ({self.max_pending_decoded_bytes}) must be at least "
                f"max_record_bytes ({self.max_record_bytes}), so any record fits once consumed"
            )


def parse_log(section: Mapping[str, Any]) -> LogConfig:
    values = {key: toml.integer(f"log.{key}", value, 0) for key, value in section.items()}
    try:
        return LogConfig(**values)
    except ValueError as error:
        pending = "max_pending_decoded_bytes"
        key = pending if str(error).startswith(pending) else next(iter(values), "log")
        raise ConfigError(f"log.{key}", values.get(key), str(error)) from None
