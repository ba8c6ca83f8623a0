"""Golden tests: OTLP payloads of every metric type land in the table as exactly these rows."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    AGGREGATION_TEMPORALITY_DELTA,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    Sum,
    Summary,
    SummaryDataPoint,
)

from exporters.otlp_rows import flatten_batch, iter_rows
from tests.exporters.lake_support import land, read_rows
from tests.exporters.support import (
    CONSUMER_PUSH,
    PRODUCER_PUSH,
    RECEIVED_NS,
    T0,
    T1,
    kv,
    payload,
    push,
    row,
)

if TYPE_CHECKING:
    from pathlib import Path

    from exporters.api import LoggedPush

DELTA, CUMULATIVE = AGGREGATION_TEMPORALITY_DELTA, AGGREGATION_TEMPORALITY_CUMULATIVE


def point(**fields: Any) -> NumberDataPoint:
    return NumberDataPoint(start_time_unix_nano=T0, time_unix_nano=T1, **fields)


def landed(**values: Any) -> dict[str, Any]:
    """An expected row of the table: ``support.row`` with its times in µs."""
    expected = row(**values)
    for name in ("time", "start_time", "received_time"):
        if expected[name] is not None:
            expected[name] //= 1000
    return expected


GAUGE = Metric(
    name="org.apache.kafka.producer.node.request.latency.avg",
    gauge=Gauge(
        data_points=[
            point(as_double=1.5, attributes=[kv("node.id", int_value=1)]),
            point(as_double=2.5, attributes=[kv("node.id", int_value=2)]),
        ]
    ),
)
SUM = Metric(
    name="org.apache.kafka.producer.connection.creation.total",
    sum=Sum(data_points=[point(as_int=7)], aggregation_temporality=DELTA, is_monotonic=True),
)
UPDOWN = Metric(
    name="queue.depth",
    unit="1",
    sum=Sum(data_points=[point(as_int=-3)], aggregation_temporality=CUMULATIVE),
)
HISTOGRAM = Metric(
    name="request.latency",
    unit="ms",
    histogram=Histogram(
        aggregation_temporality=DELTA,
        data_points=[
            HistogramDataPoint(
                start_time_unix_nano=T0,
                time_unix_nano=T1,
                count=6,
                sum=12.5,
                min=0.5,
                max=9.0,
                bucket_counts=[1, 2, 3],
                explicit_bounds=[1.0, 5.0],
            )
        ],
    ),
)
EXP_HISTOGRAM = Metric(
    name="request.size",
    exponential_histogram=ExponentialHistogram(
        aggregation_temporality=CUMULATIVE,
        data_points=[
            ExponentialHistogramDataPoint(
                start_time_unix_nano=T0,
                time_unix_nano=T1,
                count=5,
                sum=40.0,
                scale=2,
                zero_count=1,
                zero_threshold=0.001,
                positive=ExponentialHistogramDataPoint.Buckets(offset=3, bucket_counts=[2, 2]),
            )
        ],
    ),
)
SUMMARY = Metric(
    name="rtt",
    summary=Summary(
        data_points=[
            SummaryDataPoint(
                start_time_unix_nano=T0,
                time_unix_nano=T1,
                count=4,
                sum=10.0,
                quantile_values=[
                    SummaryDataPoint.ValueAtQuantile(quantile=0.5, value=2.0),
                    SummaryDataPoint.ValueAtQuantile(quantile=0.99, value=4.0),
                ],
            )
        ]
    ),
)


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One landing for all golden pushes (opening the table is the slow part)."""
    root = tmp_path_factory.mktemp("golden")
    batches: list[list[LoggedPush]] = [
        [push(payload(GAUGE), offset=10), push(payload(SUM, UPDOWN), offset=11)],
        [push(payload(HISTOGRAM), offset=12), push(payload(EXP_HISTOGRAM), offset=13)],
        [push(payload(SUMMARY), offset=14, terminating=True)],
        [
            push(PRODUCER_PUSH.read_bytes(), offset=20, client_id=None),
            push(CONSUMER_PUSH.read_bytes(), offset=21),
        ],
    ]
    exporter = land(root, batches)
    return root, exporter


def rows_at(root: Path, offset: int) -> list[dict[str, Any]]:
    return [r for r in read_rows(root) if r["push_offset"] == offset]


def test_gauge_points_land_one_row_each_with_their_node_id(golden: tuple[Path, Any]) -> None:
    root, _ = golden
    common = {
        "metric_name": GAUGE.name,
        "metric_type": "gauge",
        "temporality": "none",
        "push_offset": 10,
    }
    assert rows_at(root, 10) == [
        landed(**common, value=1.5, attributes={"node.id": "1"}),
        landed(**common, value=2.5, attributes={"node.id": "2"}),
    ]


def test_sums_keep_temporality_and_monotonicity(golden: tuple[Path, Any]) -> None:
    root, _ = golden
    assert rows_at(root, 11) == [
        landed(
            metric_name=SUM.name,
            metric_type="sum",
            temporality="delta",
            is_monotonic=True,
            value=7.0,
            push_offset=11,
        ),
        landed(
            metric_name="queue.depth",
            metric_type="sum",
            temporality="cumulative",
            is_monotonic=False,
            unit="1",
            value=-3.0,
            push_offset=11,
        ),
    ]


def test_histograms_land_counts_and_bounds(golden: tuple[Path, Any]) -> None:
    root, _ = golden
    histogram, exponential = rows_at(root, 12), rows_at(root, 13)
    assert histogram == [
        landed(
            metric_name="request.latency",
            metric_type="histogram",
            temporality="delta",
            unit="ms",
            count=6,
            sum=12.5,
            min=0.5,
            max=9.0,
            bucket_counts=[1, 2, 3],
            explicit_bounds=[1.0, 5.0],
            push_offset=12,
        )
    ]
    assert exponential == [
        landed(
            metric_name="request.size",
            metric_type="exponential_histogram",
            temporality="cumulative",
            count=5,
            sum=40.0,
            exp_scale=2,
            exp_zero_count=1,
            exp_zero_threshold=0.001,
            exp_positive_offset=3,
            exp_positive_bucket_counts=[2, 2],
            exp_negative_offset=0,
            exp_negative_bucket_counts=[],
            push_offset=13,
        )
    ]


def test_summaries_land_quantiles_and_the_terminating_flag(golden: tuple[Path, Any]) -> None:
    root, _ = golden
    assert rows_at(root, 14) == [
        landed(
            metric_name="rtt",
            metric_type="summary",
            temporality="none",
            count=4,
            sum=10.0,
            quantiles=[0.5, 0.99],
            quantile_values=[2.0, 4.0],
            terminating=True,
            push_offset=14,
        )
    ]


def test_recorded_librdkafka_pushes_land_one_row_per_data_point(golden: tuple[Path, Any]) -> None:
    root, exporter = golden
    producer, consumer = rows_at(root, 20), rows_at(root, 21)
    assert (len(producer), len(consumer)) == (10, 15)
    # The same rows the shared flattener produces (µs times); the table holds each kind
    # in files of its own, so a scan's order is not the payload's.
    columns, _ = flatten_batch([push(CONSUMER_PUSH.read_bytes(), offset=21)])
    expected = list(iter_rows(columns))
    assert sorted((r["metric_name"], r["value"], r["time"]) for r in consumer) == sorted(
        (r["metric_name"], r["value"], r["time"] // 1000) for r in expected
    )
    # Repeated per-broker names stay apart, told by node.id.
    per_broker = [r for r in consumer if r["attributes"].get("node.id")]
    assert len({(r["metric_name"], r["attributes"]["node.id"]) for r in per_broker}) == len(
        per_broker
    )
    # No client id in the push context and none in the (absent) resource: null, not invented.
    assert {r["client_id"] for r in producer} == {None}
    assert {r["client_instance_id"] for r in producer} == {row()["client_instance_id"]}
    assert exporter.stats.rows_landed == exporter.stats.data_points == 10 + 15 + 2 + 2 + 1 + 1 + 1


def test_nan_inf_empty_unknown_and_undecodable_are_counted_never_fatal(tmp_path: Path) -> None:
    metrics = [
        Metric(name="nan", gauge=Gauge(data_points=[point(as_double=math.nan)])),
        Metric(name="inf", gauge=Gauge(data_points=[point(as_double=-math.inf)])),
        Metric(name="empty", gauge=Gauge()),
        Metric(name="unknown"),
        Metric(name="fine", gauge=Gauge(data_points=[point(as_double=0.25)])),
    ]
    # A time far beyond what timestamp[ns] holds must not break the batch either.
    huge = Metric(name="far", gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=2**64 - 1)]))
    exporter = land(
        tmp_path,
        [
            [
                push(payload(*metrics), offset=1),
                push(b"\xff\xff not protobuf", offset=2),
                push(payload(huge), offset=3),
            ]
        ],
    )
    stats = exporter.stats
    assert (stats.nan_values, stats.inf_values) == (1, 1)
    assert (stats.empty_metrics, stats.unknown_metric_types) == (1, 1)
    assert (stats.undecodable_payloads, stats.undecodable_offsets) == (1, [2])
    rows = read_rows(tmp_path)
    assert [(r["metric_name"], r["value"]) for r in rows] == [
        ("nan", None),
        ("inf", None),
        ("fine", 0.25),
        ("far", None),
    ]
    assert rows[-1]["time"] == (2**64 - 1) // 1000
    assert stats.rows_landed == 4
    assert rows[0]["received_time"] == RECEIVED_NS // 1000
