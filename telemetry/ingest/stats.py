"""Plain counters of the ingest log, read by the Prometheus wiring.

Plain attributes rather than prometheus-client objects keep the log free of a
registry and cheap to update from the writer thread (one writer, so no lock:
readers may see a value one update old, never a torn one).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# Upper bounds in seconds; the last bucket counts everything slower.
FSYNC_BUCKETS_S: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)


@dataclass(slots=True)
class LogStats:
    """Counters since the log was opened (monotonic unless noted)."""

    appends: int = 0
    appended_bytes: int = 0
    group_commits: int = 0
    largest_group: int = 0
    fsyncs: int = 0
    fsync_seconds_total: float = 0.0
    fsync_seconds_max: float = 0.0
    # Non-cumulative counts per ``FSYNC_BUCKETS_S`` bound, plus one overflow bucket.
    fsync_bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(FSYNC_BUCKETS_S) + 1))
    segments_rolled: int = 0
    segments_deleted: int = 0
    refused_full: int = 0
    #: Of ``refused_full``, those refused for ``max_pending_decoded_bytes``.
    refused_pending_decoded: int = 0
    #: Gauge: decoded bytes of records appended since the log opened, not yet
    #: passed by every consumer.
    pending_decoded_bytes: int = 0
    # Gauge: True while appends are being refused for the disk budget.
    full: bool = False
    last_refusal_reason: str = ""
    recovery_truncated_bytes: int = 0
    corrupt_reads: int = 0

    def observe_fsync(self, seconds: float) -> None:
        self.fsyncs += 1
        self.fsync_seconds_total += seconds
        self.fsync_seconds_max = max(self.fsync_seconds_max, seconds)
        # The first bound >= seconds; past the last bound, the overflow bucket.
        self.fsync_bucket_counts[bisect.bisect_left(FSYNC_BUCKETS_S, seconds)] += 1
