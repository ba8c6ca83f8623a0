"""Rollup benchmark: Spark (warm session) against DuckDB on the same Iceberg landing table.

Generates realistic KIP-714 data points with numpy/pyarrow, one hour per
chunk, and appends each chunk to the landing table ``kip714.metrics``
through pyiceberg (``tests/spark_jobs/lake_writer.py``, the table contract),
so the data is never whole in memory (200 client instances under 20 client
ids, 60 metric names, every client pushing every metric each 60 s;
per-broker latency metrics once per broker; about 60 % gauge, 30 % sum (a
third cumulative), 10 % histogram points). Then it times each step of the
job's full set in one warm SparkSession reading the table through Iceberg
(with each step's input, shuffle and spill bytes), runs the same
aggregations in DuckDB over the same snapshot's data files (listed by a
pyiceberg scan), and reports throughput, the Spark/DuckDB ratio and the
peak RSS of this process tree (the driver JVM included). Before the first
size, both engines make one untimed warm-up pass over a small landing.

    python benchmarks/rollup_bench.py --points 1000000,10000000
    python benchmarks/rollup_bench.py --points 100000000 --runs 1
    python benchmarks/rollup_bench.py --quick
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import psutil  # type: ignore[import-untyped]  # no stubs installed; benchmark-only
import pyarrow as pa
from pyspark.sql import SparkSession

from spark_jobs.io import read_landing
from spark_jobs.lake import Lake
from spark_jobs.pipeline import HOUR_S, ScanStats, plan_rollups, prepare_partitioned, scan_stats
from spark_jobs.session import spark_session
from tests.spark_jobs.lake_writer import append_arrow, landing_arrow_schema

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rollup_duckdb import DUCKDB_MEMORY, DUCKDB_SPILL, time_duckdb

MAX_POINTS = 100_000_000
WARM_UP_POINTS = 300_000
TARGET_RATE = 3_000_000
TARGET_RATIO = 2.0
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


def generate(lake: Lake, points: int) -> int:
    """Append about ``points`` rows to the lake's landing, an hour per commit; the row count."""
    metrics = _metrics()
    per_push = len(metrics) - len(NODE_METRICS) + len(NODE_METRICS) * BROKERS
    clients = 200
    pushes = max(1, points // (clients * per_push))
    rng = np.random.default_rng(7)
    schema = landing_arrow_schema()
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
            "node_id": pa.array(node.astype(str), mask=~has_node),
            "ingest_node": pa.array(["bench"] * n),
        }
        table = pa.table(
            {f.name: columns.get(f.name, pa.nulls(n, f.type)).cast(f.type) for f in schema},
            schema=schema,
        )
        append_arrow(lake, table, properties={"kip714.writer": "rollup_bench"})
        written += n
    return written


def generate_apart(lake: Lake, points: int) -> int:
    """``generate`` in a child process that exits before anything is timed.

    Why: numpy and pyarrow keep the generator's buffers in this process, whose
    RSS counts in the Spark run's peak; the job itself never generates data.
    """
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return int(pool.apply(generate, (lake, points)))


def job_partitions(rows: int) -> int:
    """The job's sizing (``spark_jobs.job.Plan.shuffle_partitions``): one per ~500k rows, 1-32."""
    return max(1, min(32, -(-rows // 500_000)))


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


def stage_bytes(spark: SparkSession) -> tuple[int, int, int]:
    """(input, shuffle write, spilled) bytes of every stage so far, from Spark's status store."""
    store: Any = spark.sparkContext._jsc.sc().statusStore()
    jvm: Any = spark.sparkContext._jvm
    no_quantiles = spark.sparkContext._gateway.new_array(jvm.double, 0)  # type: ignore[union-attr]
    every = jvm.java.util.ArrayList()
    stages = store.stageList(every, False, False, no_quantiles, every).iterator()
    totals = [0, 0, 0]
    while stages.hasNext():
        stage = stages.next()
        totals[0] += stage.inputBytes()
        totals[1] += stage.shuffleWriteBytes()
        totals[2] += stage.memoryBytesSpilled() + stage.diskBytesSpilled()
    return totals[0], totals[1], totals[2]


Profile = dict[str, tuple[float, int, int, int]]
"""Step → (seconds, input bytes, shuffle write bytes, spilled bytes)."""


def _append_stats(into: list[ScanStats], landing: Any, ranges: list[Any]) -> None:
    into.append(scan_stats(landing, ranges))


def time_spark(spark: SparkSession, lake: Lake, runs: int) -> Profile:
    """Best of ``runs`` of the job's full set, step by step, as ``spark_jobs.job`` plans it.

    The steps run in write order (``plan_rollups``), so a step that reads a
    persisted result (an hourly rollup from the 1-minute one, top-N and the
    health view from the hourly ones) is timed without that result's cost.
    ``full set`` is the run's total; every output is written to the ``noop``
    sink.
    """
    end = START + timedelta(days=400)
    ranges = [(START, end)]
    best: Profile = {}

    def step(name: str, steps: Profile, action: Any) -> None:
        before, began = stage_bytes(spark), time.perf_counter()
        action()
        took, after = time.perf_counter() - began, stage_bytes(spark)
        steps[name] = (took, *(a - b for a, b in zip(after, before, strict=True)))  # type: ignore[assignment]

    for _ in range(runs):
        steps: Profile = {}
        landing = read_landing(spark, lake, ranges, None)
        stats: list[ScanStats] = []
        step("scan", steps, partial(_append_stats, stats, landing, ranges))
        rollups = plan_rollups(
            prepare_partitioned(landing),
            ranges,
            [60, HOUR_S],
            max_buckets=stats[0].max_buckets,
            points=landing,
        )
        try:
            for name, frame in rollups.outputs.items():
                step(name, steps, frame.write.format("noop").mode("overwrite").save)
        finally:
            rollups.unpersist()
        total = tuple(sum(v[i] for v in steps.values()) for i in range(4))
        steps["full set"] = (total[0], int(total[1]), int(total[2]), int(total[3]))
        if steps["full set"][0] < best.get("full set", (float("inf"), 0, 0, 0))[0]:
            best = steps
    return best


def warm_up(spark: SparkSession, root: Path) -> None:
    """One untimed pass of both engines over a small landing, printed as such.

    Why: the issue compares "one warm SparkSession against DuckDB"; without
    this the first size's Spark steps also pay the JVM's JIT compilation
    (C2 compiles the generated code of the first stages while they run),
    which a long-lived session pays once. DuckDB gets the same pass.
    """
    lake = Lake.under(root, namespace="warm_up")
    began = time.perf_counter()
    rows = generate_apart(lake, WARM_UP_POINTS)
    spark.conf.set("spark.sql.shuffle.partitions", str(job_partitions(rows)))
    spark_s = time_spark(spark, lake, 1)["full set"][0]
    duck_s = time_duckdb(lake, 1, root / "duckdb-spill")["full set"]
    print(f"warm-up (not timed): {rows:,} points, Spark {spark_s:.1f} s, DuckDB {duck_s:.1f} s, "
          f"{time.perf_counter() - began:.1f} s in all")  # fmt: skip


def _cell(value: float | None, width: int) -> str:
    return f"{value:{width}.2f}" if value else f"{'-':>{width}}"


def _mib(count: int) -> str:
    return f"{count / 1024**2:8.1f}"


def _report(rows: int, sp: Profile, db: dict[str, float]) -> None:
    print(f"{'step':<20} {'spark s':>8} {'pts/s':>8} {'duckdb s':>9} {'ratio':>6} "
          f"{'in MiB':>8} {'shuf MiB':>8} {'spill MiB':>9}")  # fmt: skip
    for name in dict.fromkeys([*sp, *db]):
        if name == "full set":
            continue
        a, b = (sp[name][0] if name in sp else None), db.get(name)
        extra = (
            f" {_mib(sp[name][1])} {_mib(sp[name][2])} {_mib(sp[name][3])} " if name in sp else ""
        )
        print(
            f"{name:<20} {_cell(a, 8)} {_cell(a and rows / a / 1e6, 7)}M "
            f"{_cell(b, 9)} {_cell(a and b and a / b, 6)}x{extra}"
        )
    total_sp, total_db = sp["full set"][0], db["full set"]
    rate = rows / total_sp
    if math.isnan(total_db):
        print(f"{'full set':<20} {total_sp:8.2f} {rate / 1e6:7.2f}M {'failed':>9}")
        print("target: within 2x of DuckDB warm: no DuckDB figure to compare")
        return
    print(
        f"{'full set':<20} {total_sp:8.2f} {rate / 1e6:7.2f}M {total_db:9.2f} "
        f"{total_sp / total_db:6.1f}x {_mib(sp['full set'][1])} {_mib(sp['full set'][2])} "
        f"{_mib(sp['full set'][3])}"
    )
    close = "met" if total_sp <= TARGET_RATIO * total_db else "MISSED"
    print(f"target: within {TARGET_RATIO:.0f}x of DuckDB warm: {close}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="1000000,10000000")
    parser.add_argument("--quick", action="store_true", help="100k points, one run each")
    parser.add_argument("--runs", type=int, default=2, help="runs per query; the best counts")
    parser.add_argument(
        "--shuffle-partitions", type=int, help="default: sized like the job (1 per ~500k points)"
    )
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help=f"skip the untimed pass of both engines over {WARM_UP_POINTS:,} points",
    )
    args = parser.parse_args()
    sizes = [100_000] if args.quick else [int(p) for p in args.points.split(",")]
    if any(s < 1 or s > MAX_POINTS for s in sizes):
        parser.error(f"--points: each size must be 1..{MAX_POINTS:,}")
    runs = 1 if args.quick else args.runs
    root = Path(tempfile.mkdtemp(prefix="kip714-bench-"))
    growth: list[tuple[int, float, int, float, int]] = []
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        with PeakRss() as rss:
            spark = spark_session(
                lake=Lake.under(root), shuffle_partitions=args.shuffle_partitions or 4,
                driver_memory="1g",
            )  # fmt: skip
            spark.range(10).count()  # start the JVM before timing anything
            if not (args.quick or args.no_warm_up):
                warm_up(spark, root)
            for size in sizes:
                lake = Lake.under(root, namespace=f"points_{size}")
                began = time.perf_counter()
                rows = generate_apart(lake, size)
                print(f"\n{rows:,} points generated into {lake.landing} in "
                      f"{time.perf_counter() - began:.1f} s")  # fmt: skip
                partitions = args.shuffle_partitions or job_partitions(rows)
                spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
                print(f"shuffle partitions: {partitions}")
                rss.peak = 0
                sp = time_spark(spark, lake, runs)
                spark_peak = rss.peak
                print(f"Spark full set: {sp['full set'][0]:.1f} s, peak RSS "
                      f"{spark_peak / 1024**3:.2f} GiB")  # fmt: skip
                rss.peak = 0
                began = time.perf_counter()
                try:
                    db = time_duckdb(lake, runs, root / "duckdb-spill")
                except duckdb.Error as exc:
                    # Beyond DuckDB's reach is a result to report, not a crash that
                    # loses Spark's figures of the same size.
                    print(f"DuckDB failed after {time.perf_counter() - began:.1f} s "
                          f"({DUCKDB_MEMORY} memory, {DUCKDB_SPILL} spill): {exc}")  # fmt: skip
                    db = {"full set": float("nan")}
                duck_peak = rss.peak
                _report(rows, sp, db)
                growth.append((rows, sp["full set"][0], spark_peak, db["full set"], duck_peak))
                verdict = "met" if spark_peak < TARGET_RSS else "MISSED"
                print(f"peak RSS (python + driver JVM) while Spark ran: "
                      f"{spark_peak / 1024**3:.2f} GiB (target < 2 GiB: {verdict}); "
                      f"while DuckDB ran: {duck_peak / 1024**3:.2f} GiB")  # fmt: skip
                print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'points':>12} {'spark s':>9} {'spark GiB':>10} {'duckdb s':>9} {'duckdb GiB':>11}")
    for rows, sp_s, sp_rss, db_s, db_rss in growth:
        print(f"{rows:>12,} {sp_s:9.1f} {sp_rss / 1024**3:10.2f} {db_s:9.1f} "
              f"{db_rss / 1024**3:11.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
