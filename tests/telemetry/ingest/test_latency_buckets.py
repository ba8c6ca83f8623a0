"""The log's latency histograms: a value on a bound counts in that bound's bucket (``le``)."""

from __future__ import annotations

from telemetry.ingest.kafka_log import ACK_BUCKETS_S, KafkaLogStats
from telemetry.ingest.stats import FSYNC_BUCKETS_S, LogStats


def test_fsync_buckets_count_a_bound_as_within_it_and_overflow_last() -> None:
    stats = LogStats()
    for seconds in (0.0, FSYNC_BUCKETS_S[0], FSYNC_BUCKETS_S[0] * 1.01, FSYNC_BUCKETS_S[-1], 99.0):
        stats.observe_fsync(seconds)
    assert stats.fsync_bucket_counts == [2, 1, *[0] * (len(FSYNC_BUCKETS_S) - 3), 1, 1]


def test_acknowledgement_buckets_count_a_bound_as_within_it_and_overflow_last() -> None:
    stats = KafkaLogStats()
    for seconds in (ACK_BUCKETS_S[1], ACK_BUCKETS_S[1] * 1.01, 60.0):
        stats.observe_ack(seconds)
    assert stats.ack_bucket_counts == [0, 1, 1, *[0] * (len(ACK_BUCKETS_S) - 3), 1]
    assert stats.acknowledged == 3
