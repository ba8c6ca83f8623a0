"""The vectorised flattener gives exactly the reference rows, or leaves the push to it."""

from __future__ import annotations

import math
import random
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    AGGREGATION_TEMPORALITY_DELTA,
    Exemplar,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
    Summary,
    SummaryDataPoint,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from exporters.api import LoggedPush
from exporters.iceberg.rows import pieces_by_kind
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


# -- what ptars no longer decodes, and the wire's oneofs ------------------------------------------


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field, to put on the wire what the SDKs never build."""
    return _EncodeVarint(number << 3 | 2) + _EncodeVarint(len(data)) + data


def _EncodeVarint(value: int) -> bytes:  # noqa: N802  (protobuf's own name for it)
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _in_scope(*metrics: bytes) -> bytes:
    """MetricsData with one resource and one scope holding these serialized metrics."""
    return _field(1, _field(2, b"".join(_field(2, m) for m in metrics)))


ARRAY = AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="x")]))
KVLIST = AnyValue(kvlist_value=KeyValueList(values=[kv("k", string_value="v")]))
GAUGE = Metric(name="g", gauge=Gauge(data_points=[point(as_int=1)])).SerializeToString()
SUM = Metric(name="g", sum=Sum(data_points=[point(as_int=2)])).SerializeToString()
# Two members of Metric's oneof on the wire: protobuf keeps the last (the sum).
TWO_KINDS = _in_scope(GAUGE + SUM, GAUGE)


def _with_value(value: AnyValue) -> list[bytes]:
    """The value in a point, metadata, an exemplar, a scope and a resource (in that order)."""
    plain = point(as_int=1)
    exemplar = point(
        as_int=1,
        exemplars=[Exemplar(as_int=1, filtered_attributes=[KeyValue(key="x", value=value)])],
    )
    scope = MetricsData(
        resource_metrics=[
            ResourceMetrics(
                scope_metrics=[
                    ScopeMetrics(
                        scope=InstrumentationScope(
                            name="s", attributes=[KeyValue(key="x", value=value)]
                        ),
                        metrics=[Metric(name="g", gauge=Gauge(data_points=[plain]))],
                    )
                ]
            )
        ]
    ).SerializeToString()
    resource = MetricsData(
        resource_metrics=[
            ResourceMetrics(
                resource=Resource(attributes=[KeyValue(key="x", value=value)]),
                scope_metrics=[
                    ScopeMetrics(metrics=[Metric(name="g", gauge=Gauge(data_points=[plain]))])
                ],
            )
        ]
    ).SerializeToString()
    return [
        payload(
            Metric(
                name="g",
                gauge=Gauge(
                    data_points=[point(as_int=1, attributes=[KeyValue(key="x", value=value)])]
                ),
            )
        ),
        payload(
            Metric(
                name="g",
                gauge=Gauge(data_points=[plain]),
                metadata=[KeyValue(key="x", value=value)],
            )
        ),
        payload(Metric(name="g", sum=Sum(data_points=[exemplar]))),
        scope,
        resource,
    ]


def _flipped(data: bytes, text: bytes) -> bytes:
    """``data`` with ``text`` made invalid UTF-8 (upb and ptars refuse such a string)."""
    assert text in data
    return data.replace(text, b"\xff" + text[1:])


def test_two_kinds_in_one_metric_land_as_the_reference() -> None:
    # main's fast path landed both kinds' points (2 rows); protobuf keeps the last kind.
    pushes = [push(TWO_KINDS, offset=1), push(SIMPLE, offset=2)]
    table, stats, _ = flatten_to_table(pushes)
    reference, reference_stats, _ = reference_table(pushes)
    same(table, reference)
    assert stats == reference_stats
    result = fast.flatten_fast(pushes)
    assert result is not None
    assert result[2] == [0]  # left to the reference flattener


def test_a_value_with_a_string_and_an_int_lands_as_the_reference() -> None:
    # AnyValue is a oneof: with string "s" then int 5 on the wire protobuf keeps
    # the int; main's fast path landed "s".
    value = _field(1, b"s") + bytes([3 << 3]) + _EncodeVarint(5)
    attribute = _field(1, b"k") + _field(2, value)
    point_bytes = point(as_int=1).SerializeToString() + _field(7, attribute)
    metric = Metric(name="a").SerializeToString() + _field(5, _field(1, point_bytes))
    pushes = [push(_in_scope(metric), offset=1)]
    reference, _, _ = reference_table(pushes)
    assert reference.column("attributes").to_pylist() == [[("k", "5")]]
    table, _, _ = flatten_to_table(pushes)
    same(table, reference)


def test_arrays_and_key_value_lists_anywhere_go_to_the_reference() -> None:
    for value in (ARRAY, KVLIST):
        pushes = [push(data, offset=i) for i, data in enumerate([SIMPLE, *_with_value(value)])]
        result = fast.flatten_fast(pushes)
        assert result is not None
        assert result[2] == [1, 2, 3, 4, 5]
        table, stats, unlandable = flatten_to_table(pushes)
        reference, reference_stats, reference_unlandable = reference_table(pushes)
        same(table, reference)
        assert stats == reference_stats
        assert unlandable == reference_unlandable


def test_exemplars_and_metadata_with_plain_values_stay_on_the_fast_path() -> None:
    pushes = [
        push(data, offset=i) for i, data in enumerate(_with_value(AnyValue(string_value="v")))
    ]
    result = fast.flatten_fast(pushes)
    assert result is not None
    assert result[2] == []
    table, stats, _ = flatten_to_table(pushes)
    reference, reference_stats, _ = reference_table(pushes)
    same(table, reference)
    assert stats == reference_stats


def test_bad_utf8_where_no_row_reads_it_is_refused_as_the_reference_refuses_it() -> None:
    # ptars skips fields no row needs; the string fields it keeps (descriptions,
    # metadata, exemplar attributes, scope attributes) so that a push upb refuses
    # is never landed by the fast path.
    text = AnyValue(string_value="zzzz")
    damaged = [_flipped(data, b"zzzz") for data in _with_value(text)[1:4]]
    described = payload(
        Metric(name="d", description="zzzz", gauge=Gauge(data_points=[point(as_int=1)]))
    )
    damaged.append(_flipped(described, b"zzzz"))
    pushes = [push(data, offset=i) for i, data in enumerate([SIMPLE, *damaged])]
    table, stats, unlandable = flatten_to_table(pushes)
    reference, reference_stats, reference_unlandable = reference_table(pushes)
    same(table, reference)
    assert stats == reference_stats
    assert unlandable == reference_unlandable
    assert table.num_rows == reference.num_rows == reference_table([push(SIMPLE)])[0].num_rows


def test_repeated_keys_apart_or_in_long_lists_go_to_the_reference() -> None:
    # Short lists are checked by comparing neighbours up to the list's length
    # apart, long ones by hashing: a repeat is found either way.
    def attributes(keys: str) -> list[KeyValue]:
        return [kv(key, string_value=str(i)) for i, key in enumerate(keys)]

    shapes = ["kxk", "abcdefgha", "abcdefghij", "ab", "abcdefghijk"]
    data = payload(
        Metric(
            name="r",
            gauge=Gauge(data_points=[point(as_int=1, attributes=attributes(k)) for k in shapes]),
        )
    )
    clean = payload(
        Metric(
            name="c",
            gauge=Gauge(data_points=[point(as_int=1, attributes=attributes("abcdefghijk"))]),
        )
    )
    pushes = [push(data, offset=1), push(clean, offset=2), push(SIMPLE, offset=3)]
    result = fast.flatten_fast(pushes)
    assert result is not None
    assert result[2] == [0]
    table, stats, _ = flatten_to_table(pushes)
    reference, reference_stats, _ = reference_table(pushes)
    same(table, reference)
    assert stats == reference_stats


@pytest.mark.parametrize(
    "payloads",
    [
        [PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes()],
        [HISTOGRAMS, SIMPLE, HISTOGRAM, HISTOGRAMS],
        [SIMPLE, HISTOGRAM, BOOL_ATTRIBUTE, SIMPLE],  # one push left to the reference
    ],
    ids=["librdkafka", "histograms", "mixed"],
)
def test_rows_grouped_by_kind_are_the_reference_rows_of_each_kind(payloads: list[bytes]) -> None:
    # For a writer with a file per kind: each kind's rows, in log order, whole.
    pushes = [push(data, offset=100 + i) for i, data in enumerate(payloads)]
    table, stats, _ = flatten_to_table(pushes, by_kind=True)
    reference, reference_stats, _ = reference_table(pushes)
    assert stats == reference_stats
    pieces = pieces_by_kind(decoded(table))
    expected = pieces_by_kind(reference)
    assert [kind for kind, _ in pieces] == [kind for kind, _ in expected]
    for (_, piece), (_, rows) in zip(pieces, expected, strict=True):
        assert piece.to_pylist() == rows.to_pylist()
