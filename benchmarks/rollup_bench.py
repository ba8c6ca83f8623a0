"""Rollup benchmark: Spark (warm session) against DuckDB on the same generated landing.

Generates realistic KIP-714 data points with pyarrow in the landing layout
(200 client instances under 20 client ids, 60 metric names, every client
pushing every metric each 60 s; per-broker latency metrics once per broker;
about 60 % gauge, 30 % sum (a third cumulative), 10 % histogram points),
then times each rollup and the full set in one warm SparkSession, runs the
same aggregations in DuckDB, and reports throughput, the Spark/DuckDB ratio
and the peak RSS of this process tree (the driver JVM included).

    python benchmarks/rollup_bench.py --points 1000000,10000000
    python benchmarks/rollup_bench.py --quick
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psutil  # type: ignore[import-untyped]  # no stubs installed; benchmark-only
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from exporters.parquet.schema import metrics_schema
from spark_jobs.io import read_landing
from spark_jobs.rollups import client_health, gauge_rollup, histogram_rollup, sum_rollup, top_n
from spark_jobs.session import spark_session

MAX_POINTS = 20_000_000
TARGET_RATE = 3_000_000
TARGET_RATIO = 4.0
TARGET_RSS = 2 * 1024**3
START = datetime(2026, 11, 21, 0, 0, tzinfo=UTC)
P = "org.apache.kafka.producer."
C = "org.apache.kafka.consumer."
NODE_METRICS = [P + "node.request.latency.avg", P + "node.request.latency.max",
                C + "node.request.latency.avg", C + "node.request.latency.max"]  # fmt: skip
BROKERS = 3


def _metrics() -> list[tuple[str, str, str]]:
    """60 names: (name, type, temporality); the 4 per-broker ones first."""
    names = [(n, "gauge", "none") for n in NODE_METRICS]
    standard = [
        P + "record.queue.time.avg", P + "record.queue.time.max", P + "produce.throttle.time.avg",
        P + "produce.throttle.time.max", P + "connection.creation.rate",
        C + "connection.creation.rate", C + "poll.idle.ratio.avg",
        C + "coordinator.commit.latency.avg", C + "coordinator.commit.latency.max",
        C + "coordinator.assigned.partitions", C + "coordinator.rebalance.latency.avg",
        C + "coordinator.rebalance.latency.max", C + "fetch.manager.fetch.latency.avg",
        C + "fetch.manager.fetch.latency.max",
    ]  # fmt: skip
    names += [(n, "gauge", "none") for n in standard]
    names += [(P + "connection.creation.total", "sum", "delta"),
              (C + "connection.creation.total", "sum", "delta"),
              (C + "coordinator.rebalance.latency.total", "sum", "cumulative")]  # fmt: skip
    while len(names) < 36:
        names.append((f"{P}extra.gauge.{len(names)}", "gauge", "none"))
    while len(names) < 54:
        kind = "cumulative" if len(names) % 3 == 0 else "delta"
        names.append((f"{P}extra.total.{len(names)}", "sum", kind))
    while len(names) < 60:
        names.append((f"{P}extra.histogram.{len(names)}", "histogram", "delta"))
    return names


def generate(root: Path, points: int) -> int:
    """Write about ``points`` rows under ``root/metrics``; returns the exact row count."""
    metrics = _metrics()
    per_push = len(metrics) - len(NODE_METRICS) + len(NODE_METRICS) * BROKERS
    clients = 200
    pushes = max(1, points // (clients * per_push))
    rng = np.random.default_rng(7)
    schema = metrics_schema()
    # One push row block, repeated: (metric index, node id or -1).
    block = [(m, b) for m in range(len(NODE_METRICS)) for b in range(BROKERS)]
    block += [(m, -1) for m in range(len(NODE_METRICS), len(metrics))]
    metric_idx = np.array([m for m, _ in block])
    node_idx = np.array([b for _, b in block])
    names = pa.array([m[0] for m in metrics])
    types = pa.array([m[1] for m in metrics])
    temps = pa.array([m[2] for m in metrics])
    bounds = [1.0, 5.0, 10.0, 50.0, 100.0]
    written = 0
    pushes_per_hour = 60
    for first in range(0, pushes, pushes_per_hour):
        n_push = min(pushes_per_hour, pushes - first)
        push = np.repeat(np.arange(first, first + n_push), clients * per_push)
        client = np.tile(np.repeat(np.arange(clients), per_push), n_push)
        metric = np.tile(metric_idx, n_push * clients)
        node = np.tile(node_idx, n_push * clients)
        n = len(push)
        time_us = (START.timestamp() * 1e6 + push * 60e6 + client * 150_000).astype(np.int64)
        kind = types.take(pa.array(metric)).to_numpy(zero_copy_only=False)
        is_hist = kind == "histogram"
        value = rng.gamma(2.0, 10.0, n)
        cumulative = temps.take(pa.array(metric)).to_numpy(zero_copy_only=False) == "cumulative"
        value = np.where(cumulative, (push + 1) * 5.0 + metric, value)
        hist_rows = int(is_hist.sum())
        buckets = rng.integers(0, 20, (hist_rows, len(bounds) + 1)).astype(np.uint64)
        counts = np.zeros(n, dtype=np.uint64)
        counts[is_hist] = buckets.sum(axis=1)
        list_offsets = np.zeros(n + 1, dtype=np.int32)
        list_offsets[1:] = np.cumsum(np.where(is_hist, len(bounds) + 1, 0))
        bound_offsets = np.zeros(n + 1, dtype=np.int32)
        bound_offsets[1:] = np.cumsum(np.where(is_hist, len(bounds), 0))
        hist_mask = ~is_hist
        has_node = node >= 0
        map_offsets = np.zeros(n + 1, dtype=np.int32)
        map_offsets[1:] = np.cumsum(has_node)
        columns: dict[str, pa.Array] = {
            "time": pa.array(time_us, pa.timestamp("us", tz="UTC")),
            "start_time": pa.array(
                np.full(n, int(START.timestamp() * 1e6)), pa.timestamp("us", tz="UTC")
            ),
            "received_time": pa.array(time_us + 5000, pa.timestamp("us", tz="UTC")),
            "client_instance_id": pa.array([f"inst-{c:04d}" for c in range(clients)]).take(
                pa.array(client)
            ),
            "client_id": pa.array([f"app-{c % 20:02d}" for c in range(clients)]).take(
                pa.array(client)
            ),
            "client_software_name": pa.array(["librdkafka"] * n),
            "client_software_version": pa.array(["2.16.0"] * n),
            "metric_name": names.take(pa.array(metric)),
            "metric_type": pa.array(kind),
            "temporality": temps.take(pa.array(metric)),
            "is_monotonic": pa.array(np.ones(n, dtype=bool), mask=kind != "sum"),
            "value": pa.array(value, mask=is_hist),
            "count": pa.array(counts, mask=hist_mask),
            "sum": pa.array(value * 3, mask=hist_mask),
            "bucket_counts": pa.ListArray.from_arrays(
                pa.array(list_offsets), pa.array(buckets.ravel()), mask=pa.array(hist_mask)
            ),
            "explicit_bounds": pa.ListArray.from_arrays(
                pa.array(bound_offsets),
                pa.array(np.tile(bounds, hist_rows)),
                mask=pa.array(hist_mask),
            ),
            "attributes": pa.MapArray.from_arrays(
                pa.array(map_offsets),
                pa.array(["node.id"] * int(has_node.sum())),
                pa.array(node[has_node].astype(str)),
            ),
            "resource_attributes": pa.MapArray.from_arrays(
                pa.array(np.zeros(n + 1, dtype=np.int32)),
                pa.array([], pa.string()),
                pa.array([], pa.string()),
            ),
            "terminating": pa.array(np.zeros(n, dtype=bool)),
            "push_offset": pa.array(push * clients + client),
        }
        table = pa.table(
            {f.name: columns.get(f.name, pa.nulls(n, f.type)).cast(f.type) for f in schema},
            schema=schema,
        )
        hour = START + timedelta(hours=first // pushes_per_hour)
        directory = root / "metrics" / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, directory / "part-0.parquet", compression="zstd")
        written += n
    return written


class PeakRss:
    """Peak RSS of this process and its children (the JVM), sampled every 0.1 s."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.1):
            try:
                rss = me.memory_info().rss + sum(
                    c.memory_info().rss for c in me.children(recursive=True)
                )
            except psutil.Error:
                continue
            self.peak = max(self.peak, rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def spark_queries(points: DataFrame) -> dict[str, Callable[[], DataFrame]]:
    def health() -> DataFrame:
        return client_health(gauge_rollup(points, "1h"), sum_rollup(points, "1h"))

    return {
        "gauges 1m": lambda: gauge_rollup(points, "1m"),
        "gauges 1h": lambda: gauge_rollup(points, "1h"),
        "sums 1m": lambda: sum_rollup(points, "1m"),
        "sums 1h": lambda: sum_rollup(points, "1h"),
        "histograms 1m": lambda: histogram_rollup(points, "1m"),
        "histograms 1h": lambda: histogram_rollup(points, "1h"),
        "top-10 by p99, 1h": lambda: top_n(gauge_rollup(points, "1h"), 10, "p99"),
        "client health 1h": health,
    }


_KEYS = "metric_name, client_id, client_instance_id, client_software_name, "
_KEYS += "client_software_version, attributes['node.id'] AS node_id"
_GROUP = "ALL"


def _gauge_sql(width: str) -> str:
    return f"""
    SELECT time_bucket(INTERVAL '{width}', time) AS window_start, {_KEYS}, count(value) AS count,
           min(value), max(value), avg(value), arg_max(value, (time, push_offset, value)) AS last,
           quantile_cont(value, [0.5, 0.95, 0.99]) AS q
    FROM landing WHERE metric_type = 'gauge' AND value IS NOT NULL GROUP BY {_GROUP}"""


def _sum_sql(width: str) -> str:
    return f"""
    WITH s AS (SELECT *, lag(value) OVER w AS prev, lag(start_time) OVER w AS prev_start
               FROM landing WHERE metric_type = 'sum' AND value IS NOT NULL
               WINDOW w AS (PARTITION BY client_instance_id, metric_name, temporality,
                            map_entries(attributes) ORDER BY time, push_offset)),
         d AS (SELECT *, CASE WHEN temporality = 'delta' THEN value
                              WHEN prev IS NULL THEN value
                              WHEN value < prev OR start_time <> prev_start THEN value
                              ELSE value - prev END AS delta FROM s)
    SELECT time_bucket(INTERVAL '{width}', time) AS window_start, {_KEYS}, count(*) AS points,
           sum(delta) AS delta, sum(delta) / epoch(INTERVAL '{width}') AS rate_per_s
    FROM d GROUP BY {_GROUP}"""


def _hist_sql(width: str) -> str:
    return f"""
    WITH e AS (SELECT time_bucket(INTERVAL '{width}', time) AS window_start, {_KEYS},
                      explicit_bounds, count, sum, unnest(bucket_counts) AS b,
                      generate_subscripts(bucket_counts, 1) AS i
               FROM landing WHERE metric_type = 'histogram'),
         m AS (SELECT window_start, metric_name, client_id, client_instance_id,
                      client_software_name, client_software_version, node_id, explicit_bounds, i,
                      sum(b) AS b FROM e GROUP BY ALL)
    SELECT window_start, metric_name, client_id, client_instance_id, node_id, explicit_bounds,
           list(b ORDER BY i) AS bucket_counts FROM m GROUP BY ALL"""


DUCKDB_QUERIES = {
    "gauges 1m": _gauge_sql("1 minute"),
    "gauges 1h": _gauge_sql("1 hour"),
    "sums 1m": _sum_sql("1 minute"),
    "sums 1h": _sum_sql("1 hour"),
    "histograms 1m": _hist_sql("1 minute"),
    "histograms 1h": _hist_sql("1 hour"),
    "top-10 by p99, 1h": f"""
        SELECT * FROM ({_gauge_sql("1 hour")}) g
        QUALIFY row_number() OVER (PARTITION BY metric_name, window_start
                                   ORDER BY q[3] DESC, client_id, client_instance_id) <= 10""",
    "client health 1h": """
        SELECT window_start, client_id, client_instance_id,
               avg(value) FILTER (WHERE metric_name LIKE '%node.request.latency.avg') AS lat,
               max(value) FILTER (WHERE metric_name LIKE '%node.request.latency.max') AS lat_max,
               avg(value) FILTER (WHERE metric_name LIKE '%record.queue.time.avg') AS q,
               max(value) FILTER (WHERE metric_name LIKE '%produce.throttle.time.max') AS t,
               sum(value) FILTER (WHERE metric_name LIKE '%connection.creation.total') AS conns
        FROM (SELECT time_bucket(INTERVAL '1 hour', time) AS window_start, * FROM landing)
        GROUP BY ALL""",
}


def time_spark(spark: SparkSession, root: Path, runs: int) -> dict[str, float]:
    landing = read_landing(spark, str(root), START, START + timedelta(days=30))
    best: dict[str, float] = {}
    for name, build in spark_queries(landing).items():
        for _ in range(runs):
            began = time.perf_counter()
            build().write.format("noop").mode("overwrite").save()
            elapsed = time.perf_counter() - began
            best[name] = min(best.get(name, elapsed), elapsed)
    return best


def time_duckdb(root: Path, runs: int) -> dict[str, float]:
    import duckdb  # noqa: PLC0415 - benchmark-only dependency

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(
        "CREATE VIEW landing AS SELECT * FROM read_parquet("
        f"'{root}/metrics/*/*/*.parquet', hive_partitioning = true)"
    )
    best: dict[str, float] = {}
    for name, sql in DUCKDB_QUERIES.items():
        for _ in range(runs):
            began = time.perf_counter()
            con.execute(f"CREATE OR REPLACE TEMP TABLE out AS {sql}")
            elapsed = time.perf_counter() - began
            best[name] = min(best.get(name, elapsed), elapsed)
    con.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="1000000,10000000")
    parser.add_argument("--quick", action="store_true", help="100k points, one run each")
    parser.add_argument("--runs", type=int, default=2, help="runs per query; the best counts")
    args = parser.parse_args()
    sizes = [100_000] if args.quick else [int(p) for p in args.points.split(",")]
    if any(s < 1 or s > MAX_POINTS for s in sizes):
        parser.error(f"--points: each size must be 1..{MAX_POINTS:,}")
    runs = 1 if args.quick else args.runs
    spark_peak = 0
    with PeakRss() as rss:
        spark = spark_session(shuffle_partitions=4, driver_memory="1g")
        spark.range(10).count()  # start the JVM before timing anything
        for size in sizes:
            root = Path(tempfile.mkdtemp(prefix="kip714-bench-"))
            try:
                began = time.perf_counter()
                rows = generate(root, size)
                print(f"\n{rows:,} points generated in {time.perf_counter() - began:.1f} s")
                rss.peak = 0
                sp = time_spark(spark, root, runs)
                spark_peak = max(spark_peak, rss.peak)
                db = time_duckdb(root, runs)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            print(f"{'rollup':<20} {'spark s':>8} {'pts/s':>8} {'duckdb s':>9} {'ratio':>6}")
            for name in sp:
                print(
                    f"{name:<20} {sp[name]:8.2f} {rows / sp[name] / 1e6:7.2f}M "
                    f"{db[name]:9.2f} {sp[name] / db[name]:6.1f}x"
                )
            total_sp, total_db = sum(sp.values()), sum(db.values())
            rate = rows / total_sp
            print(
                f"{'full set':<20} {total_sp:8.2f} {rate / 1e6:7.2f}M {total_db:9.2f} "
                f"{total_sp / total_db:6.1f}x"
            )
            fast = "met" if rate >= TARGET_RATE else "MISSED"
            close = "met" if total_sp <= TARGET_RATIO * total_db else "MISSED"
            print(
                f"targets: >= {TARGET_RATE / 1e6:.0f}M pts/s: {fast}; "
                f"within {TARGET_RATIO:.0f}x of DuckDB: {close}"
            )
        spark.stop()
    verdict = "met" if spark_peak < TARGET_RSS else "MISSED"
    print(
        f"peak RSS while Spark ran (python + driver JVM): {spark_peak / 1024**3:.2f} GiB "
        f"(target < 2 GiB: {verdict}); whole run incl. DuckDB: {rss.peak / 1024**3:.2f} GiB"
    )


if __name__ == "__main__":
    main()
