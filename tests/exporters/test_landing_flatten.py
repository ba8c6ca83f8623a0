"""The vectorised flattener gives exactly the reference rows, or leaves the push to it."""

from __future__ import annotations

import math
import random
from typing import Any

import pyarrow as pa
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

from exporters.api import LoggedPush
from exporters.landing import fast
from exporters.landing.flatten import flatten_to_table, reference_table
from exporters.landing.schema import decoded
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, T0, T1, kv, payload, push


def point(**fields: Any) -> NumberDataPoint:
    return NumberDataPoint(start_time_unix_nano=T0, time_unix_nano=T1, **fields)


SIMPLE = payload(
    Metric(
        name="g",
        gauge=Gauge(data_points=[point(as_double=1.5, attributes=[kv("node.id", int_value=3)])]),
    ),
    Metric(
        name="s",
        unit="ms",
        sum=Sum(
            data_points=[point(as_int=4)],
            aggregation_temporality=AGGREGATION_TEMPORALITY_DELTA,
            is_monotonic=True,
        ),
    ),
    Metric(
        name="c",
        sum=Sum(
            data_points=[point(as_int=-4)],
            aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE,
        ),
    ),
    Metric(name="u", sum=Sum(data_points=[point(as_int=1)])),
    Metric(
        name="odd values",
        gauge=Gauge(
            data_points=[
                point(as_double=math.nan),
                point(as_double=math.inf),
                point(),
                point(as_double=2.0, flags=1),
                NumberDataPoint(as_int=9),  # no times at all
                NumberDataPoint(time_unix_nano=2**64 - 1, start_time_unix_nano=2**63, as_int=1),
                point(as_int=1, attributes=[kv("a", string_value="x"), kv("b", int_value=2)]),
            ]
        ),
    ),
)
HISTOGRAM = payload(
    Metric(
        name="h", histogram=Histogram(data_points=[HistogramDataPoint(count=1, time_unix_nano=T1)])
    )
)
HISTOGRAMS = payload(
    Metric(name="g", gauge=Gauge(data_points=[point(as_int=1)])),
    Metric(
        name="latency",
        unit="ms",
        histogram=Histogram(
            aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE,
            data_points=[
                HistogramDataPoint(
                    start_time_unix_nano=T0,
                    time_unix_nano=T1,
                    count=6,
                    sum=21.5,
                    min=0.5,
                    max=9.0,
                    bucket_counts=[1, 2, 3],
                    explicit_bounds=[1.0, 5.0],
                    attributes=[kv("http.route", string_value="/a"), kv("n", int_value=2)],
                ),
                HistogramDataPoint(time_unix_nano=T1, count=0),  # no sum, min, max or buckets
                HistogramDataPoint(
                    time_unix_nano=T1,
                    count=2,
                    sum=math.nan,
                    min=-math.inf,
                    max=1.0,
                    bucket_counts=[1, 1],
                    explicit_bounds=[math.inf],
                ),
                HistogramDataPoint(count=3, sum=1.0, bucket_counts=[3], flags=1),  # no value
            ],
        ),
    ),
    Metric(name="s", sum=Sum(data_points=[point(as_double=2.5)], is_monotonic=True)),
    Metric(
        name="delta",
        histogram=Histogram(
            aggregation_temporality=AGGREGATION_TEMPORALITY_DELTA,
            data_points=[HistogramDataPoint(time_unix_nano=T1, count=1, bucket_counts=[1])],
        ),
    ),
    Metric(name="h", histogram=Histogram(data_points=[HistogramDataPoint(count=1, sum=1.0)])),
)
ONLY_HISTOGRAMS = payload(
    Metric(
        name="h",
        histogram=Histogram(
            data_points=[
                HistogramDataPoint(time_unix_nano=T1, count=1, explicit_bounds=[1.0, 2.0]),
                HistogramDataPoint(
                    time_unix_nano=T1, count=2, sum=-math.inf, explicit_bounds=[math.nan, 3.0]
                ),
            ]
        ),
    ),
    resource={"host": "h1"},
)
SUMMARY = payload(
    Metric(name="q", summary=Summary(data_points=[SummaryDataPoint(count=1, time_unix_nano=T1)]))
)
EXPONENTIAL = payload(
    Metric(
        name="e",
        exponential_histogram=ExponentialHistogram(
            data_points=[ExponentialHistogramDataPoint(count=1, time_unix_nano=T1)]
        ),
    )
)
BOOL_ATTRIBUTE = payload(
    Metric(
        name="b", gauge=Gauge(data_points=[point(as_int=1, attributes=[kv("on", bool_value=True)])])
    )
)
DUPLICATE_KEY = payload(
    Metric(
        name="d",
        gauge=Gauge(
            data_points=[
                point(as_int=1, attributes=[kv("k", string_value="1"), kv("k", string_value="2")])
            ]
        ),
    )
)
IDENTITY = payload(
    Metric(name="i", gauge=Gauge(data_points=[point(as_int=1)])),
    resource={"client_id": "from-resource"},
)
RESOURCE = payload(
    Metric(name="r", gauge=Gauge(data_points=[point(as_int=1)])), resource={"host": "h1"}
)
EMPTY = payload(Metric(name="e", gauge=Gauge()))
UNKNOWN = payload(Metric(name="x"))


def per_broker(count: int) -> list[bytes]:
    """librdkafka's shape: client-level metrics, then per-broker gauges told apart by node.id."""
    rng = random.Random(1)
    out = []
    for _ in range(count):
        metrics = [
            Metric(
                name="org.apache.kafka.producer.connection.creation.total",
                sum=Sum(
                    data_points=[point(as_int=rng.randrange(100))],
                    aggregation_temporality=AGGREGATION_TEMPORALITY_DELTA,
                    is_monotonic=True,
                ),
            )
        ]
        for node in range(26, 0, -1):
            value = point(as_double=rng.random(), attributes=[kv("node.id", int_value=node)])
            metrics.append(
                Metric(
                    name="org.apache.kafka.producer.node.request.latency.avg",
                    gauge=Gauge(data_points=[value]),
                )
            )
        out.append(payload(*metrics))
    return out


def same(table: pa.Table, reference: pa.Table) -> None:
    # The fast path's repeating strings are dictionaries over the same values.
    table = decoded(table)
    assert table.schema == reference.schema
    assert table.to_pylist() == reference.to_pylist()


def test_the_fast_path_is_available() -> None:
    # ptars must be installed for the throughput target; without it everything
    # still lands through the reference path, and this test says so loudly.
    assert fast.available()


@pytest.mark.parametrize(
    "payloads",
    [
        [PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes()],
        [SIMPLE],
        per_broker(5),
        [SIMPLE, HISTOGRAM, PRODUCER_PUSH.read_bytes(), BOOL_ATTRIBUTE, SIMPLE],
        [HISTOGRAMS, SIMPLE, HISTOGRAM, HISTOGRAMS],
        [HISTOGRAMS],
        [ONLY_HISTOGRAMS, ONLY_HISTOGRAMS],
        [DUPLICATE_KEY, IDENTITY, RESOURCE, EMPTY, UNKNOWN, SIMPLE],
        [SIMPLE, b"\xff\xff not protobuf", SIMPLE],
        [b"", SIMPLE],
    ],
    ids=[
        "librdkafka",
        "simple",
        "per-broker",
        "mixed",
        "histograms-mixed",
        "histograms",
        "only-histograms",
        "odd",
        "undecodable",
        "empty-payload",
    ],
)
def test_rows_and_stats_equal_the_reference(payloads: list[bytes]) -> None:
    pushes = [
        push(data, offset=100 + i, client_id=None if i % 2 else "probe", terminating=i == 1)
        for i, data in enumerate(payloads)
    ]
    table, stats, unlandable = flatten_to_table(pushes)
    reference, reference_stats, _ = reference_table(pushes)
    same(table, reference)
    assert unlandable == []
    assert stats == reference_stats


def test_pushes_it_cannot_handle_are_left_to_the_reference() -> None:
    pushes: list[LoggedPush] = [
        push(data, offset=i)
        for i, data in enumerate(
            [
                SIMPLE,
                SUMMARY,
                BOOL_ATTRIBUTE,
                DUPLICATE_KEY,
                IDENTITY,
                RESOURCE,
                EMPTY,
                UNKNOWN,
                EXPONENTIAL,
                HISTOGRAMS,
            ]
        )
    ]
    result = fast.flatten_fast(pushes)
    assert result is not None
    _, stats, left_out = result
    assert left_out == [1, 2, 3, 4, 6, 7, 8]
    assert stats.pushes == 3
    assert fast.flatten_fast([push(b"\xff\xff bad", offset=1)]) is None
    # Garbage in one push leaves only that push to the reference path.
    mixed = fast.flatten_fast([push(SIMPLE, offset=1), push(b"\xff\xff bad", offset=2)])
    assert mixed is not None
    assert mixed[2] == [1]
    assert mixed[0].num_rows == 11


def test_damaged_payloads_never_raise_and_match_the_reference() -> None:
    # Bytes flipped at random in real payloads: whatever ptars and upb make of
    # them, the landing's rows are the reference rows and nothing raises.
    rng = random.Random(714)
    originals = [PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes(), SIMPLE]
    for round_ in range(40):
        pushes = []
        for i in range(5):
            data = bytearray(rng.choice(originals))
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            pushes.append(push(bytes(data), offset=round_ * 10 + i))
        table, stats, unlandable = flatten_to_table(pushes)
        reference, reference_stats, reference_unlandable = reference_table(pushes)
        same(table, reference)
        assert stats == reference_stats
        assert unlandable == reference_unlandable
