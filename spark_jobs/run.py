"""One run's work in Spark: read the landing snapshot, compute the full set, replace the windows.

Separate from ``job`` (arguments, pre-flight, exit codes) so the benchmark
and the tests drive the very same steps in a warm session.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from spark_jobs import io, metadata
from spark_jobs.lake import Lake
from spark_jobs.pipeline import plan_rollups, prepare_partitioned, scan_stats
from spark_jobs.rollups import DEFAULT_LOOKBACK, unrolled_points

if TYPE_CHECKING:
    from health_rules import RuleSet

__all__ = ["JobSummary", "run_rollups"]

_PROG = "kip714 rollup"
_UNROLLED_NAMES = 5


@dataclass
class JobSummary:
    """What a run did, for the closing lines a user reads."""

    snapshot_id: int
    ranges: list[io.Range]
    incremental_after: int | None = None
    rows_read: int = 0
    written: dict[str, int] = field(default_factory=dict)
    unrolled: list[tuple[str, str, int, list[tuple[str, int]]]] = field(default_factory=list)
    """``(metric_type, reason, points, [(metric_name, points), …])``, largest first."""
    top_latency: list[tuple[str, str, str, float]] = field(default_factory=list)

    def render(self) -> str:
        spans = ", ".join(f"{s:%Y-%m-%dT%H:%M}Z .. {e:%Y-%m-%dT%H:%M}Z" for s, e in self.ranges)
        source = f"landing snapshot {self.snapshot_id}"
        if self.incremental_after is not None:
            source = f"appends after snapshot {self.incremental_after} up to {self.snapshot_id}"
        lines = [
            f"{_PROG}: {spans or 'no windows touched'} ({source}), "
            f"{self.rows_read:,} data points read",
        ]
        lines += [f"  {name:<24} {rows:>10,} rows written" for name, rows in self.written.items()]
        for kind, reason, points, metrics in self.unrolled:
            lines.append(f"  not rolled up: {points:,} {kind} points ({reason}):")
            lines += [f"    {n:>10,}  {name}" for name, n in metrics[:_UNROLLED_NAMES]]
            if len(metrics) > _UNROLLED_NAMES:
                lines.append(f"    … and {len(metrics) - _UNROLLED_NAMES} more metrics")
        if self.top_latency:
            lines.append("  top clients by p99 request latency (worst broker, ms):")
            lines += [
                f"    {p99:10.1f}  {client_id} ({kind}, instance {instance})"
                for client_id, instance, kind, p99 in self.top_latency
            ]
        return "\n".join(lines)


def _unrolled(
    points: DataFrame,
) -> list[tuple[str, str, int, list[tuple[str, int]]]]:
    rows = unrolled_points(points, by_metric=True).collect()
    grouped: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for row in rows:
        grouped.setdefault((row["metric_type"], row["reason"]), []).append(
            (str(row["metric_name"]), int(row["points"]))
        )
    result = []
    for (kind, reason), metrics in sorted(grouped.items()):
        metrics.sort(key=lambda m: (-m[1], m[0]))
        result.append((kind, reason, sum(n for _, n in metrics), metrics))
    return result


def run_rollups(
    spark: SparkSession,
    lake: Lake,
    snapshot_id: int,
    ranges: Sequence[io.Range],
    windows: list[int],
    outputs: Sequence[str],
    *,
    top: int = 10,
    top_by: str = "p99",
    rules: RuleSet | None = None,
    incremental_after: int | None = None,
    existing: Collection[str] | None = None,
    writers: int = 1,
) -> JobSummary:
    """Recompute and replace every output over ``ranges`` from landing snapshot ``snapshot_id``.

    ``existing``: the output tables the pre-flight found (None: ask the catalog).
    ``writers``: outputs planned, computed and committed at once (threads of
    one session). Each output is still one commit of its own table.
    """
    summary = JobSummary(snapshot_id, list(ranges), incremental_after)
    if not ranges:
        return summary
    # Cumulative points need their predecessor: read DEFAULT_LOOKBACK before each range.
    reach = io.merge_ranges((start - DEFAULT_LOOKBACK, end) for start, end in ranges)
    points = io.read_landing(spark, lake, reach, snapshot_id)
    # Every rollup reads this projection: its own kind's columns, shuffled once.
    prepared = prepare_partitioned(points)
    rollups = None
    try:
        stats = scan_stats(points, ranges)
        summary.rows_read = stats.rows
        rollups = plan_rollups(
            prepared,
            ranges,
            windows,
            top=top,
            top_by=top_by,
            max_buckets=stats.max_buckets,
            points=points,
            rules=rules,
        )
        assert list(rollups.outputs) == list(outputs), "output order is the job's contract"

        def write(name: str) -> int:
            exists = None if existing is None else name in existing
            io.write_output(rollups.outputs[name], lake, name, ranges, snapshot_id, exists=exists)
            return metadata.output_written_rows(lake, name)

        with ThreadPoolExecutor(max_workers=writers) as pool:
            written = {name: pool.submit(write, name) for name in rollups.outputs}
            unrolled = pool.submit(_unrolled, points.where(io.within("time", ranges)))
            # From the frame just written (its hourly inputs are still persisted), not a
            # re-read of the table: the same rows, without another catalog load and scan.
            top_latency = pool.submit(_worst_latency, rollups.outputs["client_health_1h"])
            summary.written = {name: future.result() for name, future in written.items()}
            summary.unrolled = unrolled.result()
            summary.top_latency = top_latency.result()
    finally:
        if rollups is not None:
            rollups.unpersist()
    return summary


def _worst_latency(health: DataFrame) -> list[tuple[str, str, str, float]]:
    worst = (
        health.where(sf.col("request_latency_p99_ms").isNotNull())
        .groupBy("client_id", "client_instance_id", "client_type")
        .agg(sf.max("request_latency_p99_ms").alias("p99"))
        .orderBy(sf.col("p99").desc(), "client_id", "client_instance_id")
        .limit(5)
        .collect()
    )
    return [
        (str(r["client_id"]), str(r["client_instance_id"]), str(r["client_type"]), r["p99"])
        for r in worst
    ]
