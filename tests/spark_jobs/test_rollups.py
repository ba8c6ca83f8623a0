"""Every rollup on small hand-made inputs, compared exactly."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pyspark.sql import SparkSession

from spark_jobs.pipeline import plan_rollups, prepare_partitioned
from spark_jobs.rollups import (
    client_health,
    gauge_rollup,
    histogram_rollup,
    parse_window,
    sum_rollup,
    top_n,
    unrolled_points,
    window_label,
)
from spark_jobs.rollups.histograms import histogram_rollup_from
from spark_jobs.rollups.sums import sum_rollup_from
from tests.spark_jobs.landing_data import two_hours
from tests.spark_jobs.support import assert_rows, at, frame, point

CLIENT = ("c1", "i1", "librdkafka", "2.16.0")
C2 = ("c2", "i2", "librdkafka", "2.16.0")


def test_gauges_normalise_node_id_skip_empty_windows_and_break_ties(spark: SparkSession) -> None:
    points = frame(
        spark,
        [
            point(time=at(0, 10), value=1.0, attributes={"node.id": "1"}),
            point(time=at(0, 20), value=3.0, attributes={"node_id": "1"}, push_offset=2),
            point(time=at(2, 0), value=5.0),
            point(time=at(2, 30), value=7.0, push_offset=3, attributes={"topic": "a"}),
            point(time=at(2, 30), value=6.0, push_offset=3, attributes={"topic": "b"}),
            point(time=at(2, 40), value=None),  # NaN at the source: not a value
            point(time=at(0, 30), metric_type="sum", temporality="delta", value=99.0),
        ],
    )
    assert_rows(
        spark,
        gauge_rollup(points, "1m"),
        [
            (at(0), at(1), "m", *CLIENT, "1", 2, 1.0, 3.0, 2.0, 3.0, 2.0, 2.9, 2.98),
            (at(2), at(3), "m", *CLIENT, None, 3, 5.0, 7.0, 6.0, 7.0, 6.0, 6.9, 6.98),
        ],
    )
    # The batch (sorted) and streaming (collect) plans give the very same numbers.
    assert_rows(
        spark,
        gauge_rollup(points, "1m", method="collect"),
        [tuple(row) for row in gauge_rollup(points, "1m", method="sorted").collect()],
    )


def test_sums_delta_cumulative_resets_baselines_and_mixed_temporality(spark: SparkSession) -> None:
    cumulative = {"metric_name": "s", "metric_type": "sum", "temporality": "cumulative"}
    monotonic = {**cumulative, "is_monotonic": True}
    topic = {"attributes": {"topic": "t"}}
    points = frame(
        spark,
        [
            # Series A: new at 04:00 (started within the lookback), a drop, a new start_time.
            point(time=at(0, 10), start_time=at(0), value=10.0, **monotonic),
            point(time=at(0, 40), start_time=at(0), value=15.0, **monotonic),
            point(time=at(1, 10), start_time=at(0), value=4.0, **monotonic),
            point(time=at(3, 10), start_time=at(2), value=9.0, **monotonic),
            # Series B (other topic): started long ago, so its first point is only a baseline.
            point(time=at(0, 30), start_time=at(0, hour=1), value=100.0, **monotonic, **topic),
            point(time=at(1, 30), start_time=at(0, hour=1), value=130.0, **monotonic, **topic),
            # Series D: its predecessor is older than the lookback, no start_time: baselines.
            point(time=at(0, hour=2), value=50.0, **cumulative, attributes={"k": "d"}),
            point(time=at(2, 0), value=60.0, **cumulative, attributes={"k": "d"}),
            # Another client sends the same metric as delta points.
            point(time=at(0, 5), value=2.0, metric_name="s", metric_type="sum",
                  temporality="delta", client_id="c2", client_instance_id="i2"),
            point(time=at(0, 50), value=3.0, metric_name="s", metric_type="sum",
                  temporality="delta", client_id="c2", client_instance_id="i2"),
        ],
    )  # fmt: skip
    assert_rows(
        spark,
        sum_rollup(points, "1m", lookback=timedelta(hours=1)),
        [
            (at(0, hour=2), at(1, hour=2), "s", *CLIENT, None, 1, 1, 0, None, None),
            (at(0), at(1), "s", *CLIENT, None, 3, 1, 0, 15.0, 0.25),
            (at(1), at(2), "s", *CLIENT, None, 2, 0, 1, 34.0, 34.0 / 60),
            (at(2), at(3), "s", *CLIENT, None, 1, 1, 0, None, None),
            (at(3), at(4), "s", *CLIENT, None, 1, 0, 1, 9.0, 0.15),
            (at(0), at(1), "s", *C2, None, 2, 0, 0, 5.0, 5.0 / 60),
        ],
    )


def test_histograms_merge_per_layout_and_difference_cumulative_points(spark: SparkSession) -> None:
    delta = {"metric_name": "h", "metric_type": "histogram", "temporality": "delta"}
    cumulative = {**delta, "temporality": "cumulative", "start_time": at(0)}
    points = frame(
        spark,
        [
            point(time=at(0, 10), count=4, sum=10.0, min=0.5, max=8.0,
                  bucket_counts=[1, 2, 1], explicit_bounds=[1.0, 5.0], **delta),
            point(time=at(0, 50), count=2, sum=4.0, min=1.5, max=2.5,
                  bucket_counts=[0, 2, 0], explicit_bounds=[1.0, 5.0], **delta),
            # Other bounds: a row of its own, never re-bucketed.
            point(time=at(0, 30), count=3, sum=30.0, min=2.0, max=20.0,
                  bucket_counts=[2, 1], explicit_bounds=[10.0], **delta),
            # Malformed (3 buckets needed): left out, and counted by unrolled_points.
            point(time=at(0, 40), count=2, bucket_counts=[1, 1], explicit_bounds=[1.0, 5.0],
                  **delta),
            point(time=at(1, 10), count=2, sum=3.0, min=1.0, max=2.0,
                  bucket_counts=[1, 1], explicit_bounds=[1.0], **cumulative),
            point(time=at(1, 40), count=5, sum=9.0, min=0.5, max=2.0,
                  bucket_counts=[2, 3], explicit_bounds=[1.0], **cumulative),
        ],
    )  # fmt: skip
    assert_rows(
        spark,
        histogram_rollup(points, "1m"),
        [
            (at(0), at(1), "h", *CLIENT, None, [1.0, 5.0], 2, 0, 6, 14.0, 0.5, 8.0,
             [1, 4, 1], 3.0, 7.1, 7.82),
            (at(0), at(1), "h", *CLIENT, None, [10.0], 1, 0, 3, 30.0, 2.0, 20.0,
             [2, 1], 8.0, 18.5, 19.7),
            (at(1), at(2), "h", *CLIENT, None, [1.0], 2, 0, 5, 9.0, 1.0, 2.0,
             [2, 3], 1 + 0.5 / 3, 1 + 2.75 / 3, 1 + 2.95 / 3),
        ],
    )  # fmt: skip
    # An hourly rollup merged from the 1-minute one equals the one from raw points.
    assert_rows(
        spark,
        histogram_rollup_from(histogram_rollup(points, "1m"), "1h"),
        [tuple(row) for row in histogram_rollup(points, "1h").collect()],
    )
    # Summing per bucket index (no lambdas) gives the very same rows as the fold.
    for window in ("1m", "1h"):
        expected = [tuple(row) for row in histogram_rollup(points, window).collect()]
        assert_rows(spark, histogram_rollup(points, window, max_buckets=4), expected)
    assert_rows(
        spark,
        histogram_rollup_from(histogram_rollup(points, "1m", max_buckets=3), "1h", max_buckets=3),
        [tuple(row) for row in histogram_rollup(points, "1h").collect()],
    )
    assert_rows(
        spark,
        unrolled_points(
            points.unionByName(
                frame(spark, [point(time=at(0), metric_type="exponential_histogram")])
            )
        ),
        [("exponential_histogram", "not supported", 1), ("histogram", "malformed buckets", 1)],
    )


def test_top_n_ranks_per_metric_and_hour_with_stable_ties(spark: SparkSession) -> None:
    points = frame(
        spark,
        [
            point(time=at(5), value=5.0, client_id="a", client_instance_id="ia"),
            point(time=at(6), value=9.0, client_id="c", client_instance_id="ic"),
            point(time=at(7), value=9.0, client_id="b", client_instance_id="ib"),
            point(time=at(8), value=1.0, client_id="d", client_instance_id="id", metric_name="o"),
        ],
    )
    hourly = gauge_rollup(points, "1h")
    ranked = top_n(hourly, 2, "p99").select("metric_name", "client_id", "p99", "rank")
    assert_rows(spark, ranked, [("m", "b", 9.0, 1), ("m", "c", 9.0, 2), ("o", "d", 1.0, 1)])
    with pytest.raises(ValueError, match="not a column"):
        top_n(hourly, 2, "p42")


def test_client_health_joins_the_standard_metrics_into_one_row(spark: SparkSession) -> None:
    producer = "org.apache.kafka.producer."
    latency = producer + "node.request.latency."
    consumer = "org.apache.kafka.consumer."
    node = {"attributes": {"node.id": "1"}}
    points = frame(
        spark,
        [
            point(time=at(1), metric_name=latency + "avg", value=10.0, **node),
            point(time=at(2), metric_name=latency + "avg", value=20.0, **node),
            point(time=at(3), metric_name=latency + "avg", value=30.0,
                  attributes={"node_id": "2"}),
            point(time=at(1), metric_name=latency + "max", value=50.0, **node),
            point(time=at(1), metric_name=producer + "record.queue.time.avg", value=4.0),
            point(time=at(1), metric_name=producer + "record.queue.time.max", value=6.0),
            point(time=at(1), metric_name=producer + "produce.throttle.time.avg", value=0.0),
            point(time=at(1), metric_name=producer + "produce.throttle.time.max", value=0.0),
            point(time=at(1), metric_name=producer + "connection.creation.rate", value=0.5),
            point(time=at(1), metric_name=producer + "connection.creation.total", value=3.0,
                  metric_type="sum", temporality="delta"),
            point(time=at(2), metric_name=producer + "connection.creation.total", value=4.0,
                  metric_type="sum", temporality="delta"),
            point(time=at(1), metric_name=consumer + "node.request.latency.avg", value=7.0,
                  client_id="c2", client_instance_id="i2", **node),
            point(time=at(1), metric_name="org.apache.kafka.producer.other", value=1.0),
        ],
    )  # fmt: skip
    health = client_health(gauge_rollup(points, "1h"), sum_rollup(points, "1h"))
    # The job derives hourly sums from the 1-minute rollup: the same rows.
    assert_rows(
        spark,
        sum_rollup_from(sum_rollup(points, "1m"), "1h"),
        [tuple(row) for row in sum_rollup(points, "1h").collect()],
    )
    end = at(0, hour=5)
    assert_rows(
        spark,
        health,
        [
            (at(0), end, *CLIENT, "producer", 20.0, 30.0, 50.0, 4.0, 6.0, 0.0, 0.0, 0.5, 7.0),
            (at(0), end, *C2, "consumer", 7.0, 7.0, None, None, None, None, None, None, None),
        ],
    )


def test_windows_must_divide_a_day() -> None:
    assert parse_window("1m") == 60
    assert parse_window(timedelta(hours=1)) == 3600
    assert window_label("60m") == "1h"
    assert window_label("90s") == "90s"
    for bad in ("7m", "0h", "1w", "abc"):
        with pytest.raises(ValueError, match="window"):
            parse_window(bad)


def test_the_full_set_is_the_same_with_generated_code_and_without(spark: SparkSession) -> None:
    # A small run evaluates its plans interpreted (session.SMALL_INPUT_CONF), a large one
    # compiles them: both must give the same rows.
    points = frame(spark, two_hours())
    ranges = [(at(0), at(0, hour=6))]
    settings = {"spark.sql.codegen.wholeStage": ("true", "false"),
                "spark.sql.codegen.factoryMode": ("FALLBACK", "NO_CODEGEN")}  # fmt: skip
    saved = {key: spark.conf.get(key, None) for key in settings}
    results = []
    stages: list[bool] = []
    try:
        for choice in (0, 1):
            for key, values in settings.items():
                spark.conf.set(key, values[choice])
            rollups = plan_rollups(prepare_partitioned(points), ranges, [60, 3600])
            results.append(
                {name: sorted(map(tuple, out.collect()), key=repr)
                 for name, out in rollups.outputs.items()}
            )  # fmt: skip
            plan = rollups.outputs["gauges_1m"]._jdf.queryExecution().executedPlan().toString()
            stages.append("*(" in plan)  # a whole-stage generated code block
            rollups.unpersist()
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    compiled, interpreted = results
    assert stages == [True, False]
    assert all(compiled[name] for name in ("gauges_1m", "sums_1h", "client_health_1h"))
    assert compiled == interpreted


def test_the_full_set_is_the_same_with_the_unpartitioned_points(spark: SparkSession) -> None:
    # Hourly gauges read the points before partitioning when the caller passes them
    # (pipeline.plan_rollups): an aggregation before the shuffle must not change a row.
    points = frame(spark, two_hours())
    ranges = [(at(0), at(0, hour=6))]
    results = []
    prepared = prepare_partitioned(points)
    for unpartitioned in (None, points):
        rollups = plan_rollups(prepared, ranges, [60, 3600], points=unpartitioned)
        results.append(
            {name: sorted(map(tuple, out.collect()), key=repr)
             for name, out in rollups.outputs.items()}
        )  # fmt: skip
        rollups.unpersist()
    partitioned, partial = results
    assert partitioned["gauges_1h"] and partitioned["top_clients_1h"]
    assert partitioned == partial
