"""Golden tests for the OTLP → landing-rows flattener."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValueList
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    Sum,
    Summary,
    SummaryDataPoint,
)

from exporters.otlp_rows import (
    COLUMNS,
    FlattenStats,
    arrow_schema,
    count_data_points,
    flatten,
    flatten_batch,
    iter_rows,
    new_columns,
    num_rows,
)
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

DELTA = 1
CUMULATIVE = 2
NO_RECORDED_VALUE = 1


def rows_of(*metrics: Metric, **payload_args: Any) -> tuple[list[dict[str, Any]], FlattenStats]:
    columns, stats = flatten(push(payload(*metrics, **payload_args)))
    assert list(columns) == list(COLUMNS)
    assert len({len(column) for column in columns.values()}) == 1
    return list(iter_rows(columns)), stats


def point(**fields: Any) -> NumberDataPoint:
    return NumberDataPoint(start_time_unix_nano=T0, time_unix_nano=T1, **fields)


def test_gauge_int_and_double_points_become_one_row_each() -> None:
    metric = Metric(
        name="org.apache.kafka.producer.node.request.latency.max",
        unit="ms",
        gauge=Gauge(
            data_points=[
                point(as_int=3, attributes=[kv("node.id", int_value=1)]),
                point(as_double=0.5, attributes=[kv("node.id", int_value=2)]),
            ]
        ),
    )
    rows, stats = rows_of(metric)
    common = {
        "metric_name": "org.apache.kafka.producer.node.request.latency.max",
        "metric_type": "gauge",
        "temporality": "none",
        "unit": "ms",
    }
    assert rows == [
        row(**common, value=3.0, attributes={"node.id": "1"}),
        row(**common, value=0.5, attributes={"node.id": "2"}),
    ]
    assert isinstance(rows[0]["value"], float)
    assert stats == FlattenStats(pushes=1, data_points=2)


@pytest.mark.parametrize(
    ("temporality", "monotonic", "expected"),
    [
        (DELTA, True, "delta"),
        (CUMULATIVE, False, "cumulative"),
        (0, True, "none"),
    ],
)
def test_sum_keeps_temporality_and_monotonicity(
    temporality: int, monotonic: bool, expected: str
) -> None:
    metric = Metric(
        name="org.apache.kafka.producer.connection.creation.total",
        sum=Sum(
            data_points=[point(as_int=1)],
            aggregation_temporality=temporality,  # type: ignore[arg-type]
            is_monotonic=monotonic,
        ),
    )
    rows, _ = rows_of(metric)
    assert rows == [
        row(
            metric_name="org.apache.kafka.producer.connection.creation.total",
            metric_type="sum",
            temporality=expected,
            is_monotonic=monotonic,
            value=1.0,
        )
    ]


def test_histogram_rows_carry_counts_bounds_and_optional_sum_min_max() -> None:
    metric = Metric(
        name="request.latency",
        unit="ms",
        histogram=Histogram(
            aggregation_temporality=CUMULATIVE,  # type: ignore[arg-type]
            data_points=[
                HistogramDataPoint(
                    start_time_unix_nano=T0,
                    time_unix_nano=T1,
                    count=6,
                    sum=42.5,
                    min=0.5,
                    max=30.0,
                    bucket_counts=[1, 2, 3],
                    explicit_bounds=[1.0, 10.0],
                    attributes=[kv("api", string_value="produce")],
                ),
                HistogramDataPoint(
                    start_time_unix_nano=T0, time_unix_nano=T1, count=0, bucket_counts=[0]
                ),
            ],
        ),
    )
    rows, stats = rows_of(metric)
    common = {
        "metric_name": "request.latency",
        "metric_type": "histogram",
        "temporality": "cumulative",
        "unit": "ms",
    }
    assert rows == [
        row(
            **common,
            count=6,
            sum=42.5,
            min=0.5,
            max=30.0,
            bucket_counts=[1, 2, 3],
            explicit_bounds=[1.0, 10.0],
            attributes={"api": "produce"},
        ),
        row(**common, count=0, bucket_counts=[0], explicit_bounds=[]),
    ]
    assert stats.data_points == 2


def test_exponential_histogram_rows_carry_scale_offsets_and_buckets() -> None:
    dp = ExponentialHistogramDataPoint(
        start_time_unix_nano=T0,
        time_unix_nano=T1,
        count=7,
        sum=12.0,
        scale=3,
        zero_count=1,
        zero_threshold=0.001,
        positive=ExponentialHistogramDataPoint.Buckets(offset=-2, bucket_counts=[1, 2, 3]),
        negative=ExponentialHistogramDataPoint.Buckets(offset=1, bucket_counts=[0]),
        min=-1.0,
        max=9.0,
    )
    metric = Metric(
        name="fetch.size",
        exponential_histogram=ExponentialHistogram(
            data_points=[dp],
            aggregation_temporality=DELTA,  # type: ignore[arg-type]
        ),
    )
    rows, _ = rows_of(metric)
    assert rows == [
        row(
            metric_name="fetch.size",
            metric_type="exponential_histogram",
            temporality="delta",
            count=7,
            sum=12.0,
            min=-1.0,
            max=9.0,
            exp_scale=3,
            exp_zero_count=1,
            exp_zero_threshold=0.001,
            exp_positive_offset=-2,
            exp_positive_bucket_counts=[1, 2, 3],
            exp_negative_offset=1,
            exp_negative_bucket_counts=[0],
        )
    ]


def test_summary_rows_carry_quantiles() -> None:
    quantile = SummaryDataPoint.ValueAtQuantile
    metric = Metric(
        name="rtt",
        summary=Summary(
            data_points=[
                SummaryDataPoint(
                    start_time_unix_nano=T0,
                    time_unix_nano=T1,
                    count=10,
                    sum=55.0,
                    quantile_values=[
                        quantile(quantile=0.5, value=5.0),
                        quantile(quantile=0.99, value=9.5),
                    ],
                )
            ]
        ),
    )
    rows, _ = rows_of(metric)
    assert rows == [
        row(
            metric_name="rtt",
            metric_type="summary",
            temporality="none",
            count=10,
            sum=55.0,
            quantiles=[0.5, 0.99],
            quantile_values=[5.0, 9.5],
        )
    ]


def test_mixed_types_keep_every_sparse_column_aligned() -> None:
    metrics = [
        Metric(name="h", histogram=Histogram(data_points=[HistogramDataPoint(count=1)])),
        Metric(name="g", gauge=Gauge(data_points=[point(as_int=1), point(as_int=2)])),
        Metric(name="s", summary=Summary(data_points=[SummaryDataPoint(count=3, sum=1.0)])),
        Metric(name="g2", gauge=Gauge(data_points=[point(as_double=4.0)])),
    ]
    rows, _ = rows_of(*metrics)
    assert [(r["metric_name"], r["value"], r["count"]) for r in rows] == [
        ("h", None, 1),
        ("g", 1.0, None),
        ("g", 2.0, None),
        ("s", None, 3),
        ("g2", 4.0, None),
    ]
    assert rows[0]["time"] == RECEIVED_NS  # no time_unix_nano: the received time stands in
    assert rows[0]["start_time"] is None
    assert rows[3]["quantiles"] == []


def test_nan_and_infinite_values_never_land_and_are_counted() -> None:
    metrics = [
        Metric(
            name="g",
            gauge=Gauge(
                data_points=[
                    point(as_double=math.nan),
                    point(as_double=math.inf),
                    point(as_double=-math.inf),
                    point(as_double=1.5),
                ]
            ),
        ),
        Metric(
            name="h",
            histogram=Histogram(
                data_points=[
                    HistogramDataPoint(
                        time_unix_nano=T1,
                        count=1,
                        sum=math.nan,
                        max=math.inf,
                        bucket_counts=[1, 0],
                        explicit_bounds=[math.inf],
                    )
                ]
            ),
        ),
        Metric(
            name="q",
            summary=Summary(
                data_points=[
                    SummaryDataPoint(
                        time_unix_nano=T1,
                        count=1,
                        sum=1.0,
                        quantile_values=[
                            SummaryDataPoint.ValueAtQuantile(quantile=0.5, value=math.nan)
                        ],
                    )
                ]
            ),
        ),
    ]
    rows, stats = rows_of(*metrics)
    assert [r["value"] for r in rows[:4]] == [None, None, None, 1.5]
    assert rows[4]["sum"] is None
    assert rows[4]["max"] is None
    assert rows[4]["explicit_bounds"] == [None]
    assert rows[5]["quantile_values"] == [None]
    assert rows[5]["quantiles"] == [0.5]
    assert stats.nan_values == 3  # gauge, histogram sum, quantile value
    assert stats.inf_values == 4  # +inf, -inf, histogram max, bound
    assert stats.data_points == 6


def test_points_without_a_value_land_with_null_value_and_are_counted() -> None:
    metrics = [
        Metric(
            name="g",
            gauge=Gauge(
                data_points=[point(), point(as_int=5, flags=NO_RECORDED_VALUE)],
            ),
        ),
        Metric(
            name="h",
            histogram=Histogram(
                data_points=[HistogramDataPoint(time_unix_nano=T1, count=4, flags=1)]
            ),
        ),
    ]
    rows, stats = rows_of(*metrics)
    assert [(r["metric_name"], r["value"], r["count"]) for r in rows] == [
        ("g", None, None),
        ("g", None, None),
        ("h", None, None),
    ]
    assert stats.missing_values == 3


def test_empty_and_unknown_metrics_yield_no_rows_and_are_counted() -> None:
    metrics = [
        Metric(name="no-points", gauge=Gauge()),
        Metric(name="no-points-sum", sum=Sum(aggregation_temporality=1)),  # type: ignore[arg-type]
        Metric(name="no-points-hist", histogram=Histogram()),
        Metric(name="no-data-at-all"),
        Metric(name="kept", gauge=Gauge(data_points=[point(as_int=1)])),
    ]
    rows, stats = rows_of(*metrics)
    assert [r["metric_name"] for r in rows] == ["kept"]
    assert stats.empty_metrics == 3
    assert stats.unknown_metric_types == 1


def test_a_metric_type_from_a_newer_otlp_is_counted_as_unknown() -> None:
    # Field 99 inside Metric stands for a data oneof member this proto does not know.
    unknown_field = bytes([0x9A, 0x06, 0x00])  # tag 99, wire type 2, length 0
    metric = Metric(name="future").SerializeToString() + unknown_field
    data = MetricsData()
    data.resource_metrics.add().scope_metrics.add().metrics.add().ParseFromString(metric)
    columns, stats = flatten(push(data.SerializeToString()))
    assert num_rows(columns) == 0
    assert stats.unknown_metric_types == 1
    assert stats.undecodable_payloads == 0


def test_attribute_values_are_stringified_by_the_documented_rules() -> None:
    attributes = [
        kv("s", string_value="x"),
        kv("i", int_value=-3),
        kv("b", bool_value=True),
        kv("f", bool_value=False),
        kv("d", double_value=0.25),
        kv("nan", double_value=math.nan),
        kv("raw", bytes_value=b"\x00\xff"),
        kv(
            "arr",
            array_value=ArrayValue(
                values=[
                    AnyValue(int_value=1),
                    AnyValue(string_value="a"),
                    AnyValue(bool_value=True),
                    AnyValue(double_value=math.inf),
                ]
            ),
        ),
        kv(
            "kv",
            kvlist_value=KeyValueList(values=[kv("k", string_value="v"), kv("n", int_value=2)]),
        ),
        kv("unset"),
        kv("dup", string_value="first"),
        kv("dup", string_value="last"),
    ]
    rows, _ = rows_of(
        Metric(name="g", gauge=Gauge(data_points=[point(as_int=0, attributes=attributes)]))
    )
    assert rows[0]["attributes"] == {
        "s": "x",
        "i": "-3",
        "b": "true",
        "f": "false",
        "d": "0.25",
        "nan": "nan",
        "raw": "AP8=",
        "arr": '[1,"a",true,"inf"]',
        "kv": '{"k":"v","n":2}',
        "unset": "",
        "dup": "last",
    }


def test_context_wins_and_resource_attributes_fill_only_missing_identity() -> None:
    resource = {
        "client_id": "from-resource",
        "client_software_name": "sdk",
        "client_software_version": "9.9",
        "principal": "User:mallory",
        "client_source_address": "10.6.6.6",
        "group_id": "g1",
    }
    metric = Metric(name="g", gauge=Gauge(data_points=[point(as_int=1)]))
    context_full = flatten(push(payload(metric, resource=resource)))[0]
    assert context_full["client_id"] == ["probe"]
    assert context_full["client_software_name"] == ["confluent-kafka-python"]
    assert context_full["resource_attributes"] == [resource]

    context_empty = flatten(
        push(
            payload(metric, resource=resource),
            client_id=None,
            client_software_name=None,
            client_software_version=None,
            principal=None,
            client_source_address=None,
        )
    )[0]
    assert context_empty["client_id"] == ["from-resource"]
    assert context_empty["client_software_name"] == ["sdk"]
    assert context_empty["client_software_version"] == ["9.9"]
    # Server-observed identity is never taken from what the client claims.
    assert context_empty["principal"] == [None]
    assert context_empty["client_source_address"] == [None]
    assert context_empty["client_instance_id"] == ["AAAAAAAAAAAAAAAAAAAAAQ"]


def test_undecodable_payload_is_counted_with_its_offset_and_the_batch_goes_on() -> None:
    good = payload(Metric(name="g", gauge=Gauge(data_points=[point(as_int=1)])))
    batch = [push(good, offset=1), push(b"\xff\xff\xff", offset=2), push(good, offset=3)]
    columns, stats = flatten_batch(batch)
    assert columns["push_offset"] == [1, 3]
    assert stats.undecodable_payloads == 1
    assert stats.undecodable_offsets == [2]
    assert stats.pushes == 3
    assert stats.data_points == 2


def test_batch_keeps_log_order_and_per_push_context() -> None:
    good = payload(Metric(name="g", gauge=Gauge(data_points=[point(as_int=1), point(as_int=2)])))
    batch = [push(good, offset=10, terminating=False), push(good, offset=11, terminating=True)]
    columns, _ = flatten_batch(batch)
    assert columns["push_offset"] == [10, 10, 11, 11]
    assert columns["terminating"] == [False, False, True, True]
    assert columns["value"] == [1.0, 2.0, 1.0, 2.0]


def test_an_empty_batch_gives_empty_columns() -> None:
    columns, stats = flatten_batch([])
    assert columns == new_columns()
    assert list(iter_rows(columns)) == []
    assert stats == FlattenStats()


def test_stats_merge_adds_counters_and_caps_offsets() -> None:
    total = FlattenStats(data_points=1, undecodable_offsets=list(range(999)))
    total.merge(FlattenStats(data_points=2, nan_values=1, undecodable_offsets=[5, 6]))
    assert total.data_points == 3
    assert total.nan_values == 1
    assert len(total.undecodable_offsets) == 1000
    assert total.undecodable_offsets[-1] == 5


def _independent_points(raw: bytes) -> list[tuple[str, str, dict[str, int]]]:
    """(name, type, int attributes) per data point, read straight from the protobuf."""
    data = MetricsData()
    data.ParseFromString(raw)
    found: list[tuple[str, str, dict[str, int]]] = []
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                assert kind is not None
                for dp in getattr(metric, kind).data_points:
                    attrs = {a.key: a.value.int_value for a in dp.attributes}
                    found.append((metric.name, kind, attrs))
    return found


@pytest.mark.parametrize("path", [PRODUCER_PUSH, CONSUMER_PUSH], ids=["producer", "consumer"])
def test_recorded_librdkafka_pushes_flatten_to_one_row_per_data_point(path: Any) -> None:
    raw = path.read_bytes()
    expected = _independent_points(raw)
    columns, stats = flatten(push(raw))
    assert num_rows(columns) == len(expected) == stats.data_points
    assert stats.nan_values == stats.inf_values == stats.missing_values == 0
    got = [
        (name, kind, {k: int(v) for k, v in attrs.items()})
        for name, kind, attrs in zip(
            columns["metric_name"], columns["metric_type"], columns["attributes"], strict=True
        )
    ]
    assert got == expected
    assert all(n.startswith("org.apache.kafka.") for n in columns["metric_name"])
    for kind, temporality, monotonic in zip(
        columns["metric_type"], columns["temporality"], columns["is_monotonic"], strict=True
    ):
        # librdkafka: gauges, and DELTA monotonic sums (DeltaTemporality=true).
        assert (kind, temporality, monotonic) in {("gauge", "none", None), ("sum", "delta", True)}
    assert None not in columns["value"]
    assert all(t > 1_700_000_000 * 10**9 for t in columns["time"])


def test_recorded_producer_push_has_the_expected_metrics() -> None:
    columns, _ = flatten(push(PRODUCER_PUSH.read_bytes()))
    by_name = dict(zip(columns["metric_name"], columns["metric_type"], strict=True))
    assert by_name["org.apache.kafka.producer.connection.creation.total"] == "sum"
    assert by_name["org.apache.kafka.producer.connection.creation.rate"] == "gauge"
    node_rows = [
        attrs
        for name, attrs in zip(columns["metric_name"], columns["attributes"], strict=True)
        if name == "org.apache.kafka.producer.node.request.latency.avg"
    ]
    assert node_rows == [{"node.id": "1"}]
    assert set(columns["scope_name"]) == {"kip714-probe-producer#producer-1"}
    assert columns["resource_attributes"][0] == {}  # a default producer sends no resource


def test_recorded_consumer_push_keeps_repeated_per_broker_metrics_apart() -> None:
    columns, _ = flatten(push(CONSUMER_PUSH.read_bytes()))
    latency = [
        attrs["node.id"]
        for name, attrs in zip(columns["metric_name"], columns["attributes"], strict=True)
        if name == "org.apache.kafka.consumer.node.request.latency.avg"
    ]
    assert latency == ["1", "-1"]
    assert columns["resource_attributes"][0] == {"group_id": "kip714-probe-group"}


def test_columns_load_into_arrow_with_the_documented_schema() -> None:
    metrics = [
        Metric(
            name="g", gauge=Gauge(data_points=[point(as_int=1, attributes=[kv("a", int_value=1)])])
        ),
        Metric(
            name="h",
            histogram=Histogram(data_points=[HistogramDataPoint(count=2, bucket_counts=[2])]),
        ),
    ]
    columns, _ = flatten_batch(
        [push(payload(*metrics, resource={"r": "1"})), push(CONSUMER_PUSH.read_bytes())]
    )
    table = pa.Table.from_pydict(columns, schema=arrow_schema())
    assert table.num_rows == num_rows(columns)
    assert table.schema.names == list(COLUMNS)
    assert table.schema.field("time").type == pa.timestamp("ns", tz="UTC")
    assert table.column("attributes")[0].as_py() == [("a", "1")]
    assert table.column("bucket_counts")[1].as_py() == [2]
    assert table.column("value").null_count == 1


def test_data_points_are_counted_at_the_wire_level_up_to_the_bound() -> None:
    bomb = payload(Metric(name="bomb", gauge=Gauge(data_points=[NumberDataPoint()] * 5_000)))
    assert count_data_points(bomb, 10) == 11  # stops past the bound
    assert count_data_points(bomb, 4_999) == 5_000
    assert count_data_points(bomb, 10_000) == 0  # too short to exceed it: not walked
    mixed = payload(
        Metric(name="g", gauge=Gauge(data_points=[NumberDataPoint(as_int=1)] * 3)),
        Metric(name="s", sum=Sum(data_points=[NumberDataPoint(as_double=2.0)] * 4)),
        Metric(name="h", histogram=Histogram(data_points=[HistogramDataPoint(count=1)] * 2)),
    )
    assert count_data_points(mixed, 1) == 2
    assert count_data_points(mixed, 8) == 9
    assert count_data_points(mixed[: len(mixed) // 2], 1) <= 2  # cut short: no error
    assert count_data_points(b"\xff" * 64, 1) == 0
