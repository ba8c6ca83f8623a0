"""The rollup job behind `kip714 rollup`, `python -m spark_jobs.job` and spark-submit.

All three take the same arguments (``main(argv)``). The job works in whole
hours: the range is widened to hour boundaries (and to the largest window),
every rollup is recomputed from the landing for those hours and each output
``date/hour`` partition is replaced, so a rerun over the same hours gives the
same result and picks up data that landed late.

Without ``--from``, the range is the current hour and the ``--lateness``
before it (2 hours by default): an hourly schedule therefore revisits each
hour three times, and data arriving up to 2 hours after its hour ended is
included; anything later needs an explicit ``--from/--to`` rerun.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and not __package__:
    # `spark-submit spark_jobs/job.py` puts spark_jobs/ itself first on sys.path, where
    # io.py, schema.py and session.py would shadow top-level modules of those names.
    from pathlib import Path

    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]  # py4j ships no types
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from spark_jobs import incremental, io
from spark_jobs._hadoop import HadoopFS
from spark_jobs.pipeline import plan_rollups, prepare_and_persist
from spark_jobs.rollups import DEFAULT_LOOKBACK, parse_window, unrolled_points
from spark_jobs.session import spark_session

__all__ = ["DEFAULT_LATENESS", "JobSummary", "main", "parse_args", "run_batch"]

DEFAULT_LATENESS = timedelta(hours=2)
"""How far before the current hour a run without ``--from`` reaches back."""

_PROG = "kip714 rollup"
_HOUR = 3600
_RETRIES = 2


@dataclass
class JobSummary:
    """What a run did, for the closing lines a user reads."""

    start: datetime
    end: datetime
    rows_read: int = 0
    written: dict[str, int] = field(default_factory=dict)
    unrolled: list[tuple[str, str, int]] = field(default_factory=list)
    top_latency: list[tuple[str, str, str, float]] = field(default_factory=list)

    def render(self) -> str:
        lines = [
            f"{_PROG}: {self.start:%Y-%m-%dT%H:%M}Z .. {self.end:%Y-%m-%dT%H:%M}Z, "
            f"{self.rows_read:,} data points read",
        ]
        lines += [f"  {name:<24} {rows:>10,} rows written" for name, rows in self.written.items()]
        lines += [
            f"  not rolled up: {points:,} {kind} points ({reason})"
            for kind, reason, points in self.unrolled
        ]
        if self.top_latency:
            lines.append("  top clients by p99 request latency (worst broker, ms):")
            lines += [
                f"    {p99:10.1f}  {client_id} ({kind}, instance {instance})"
                for client_id, instance, kind, p99 in self.top_latency
            ]
        return "\n".join(lines)


def _time(text: str) -> datetime:
    """ISO-8601 time, UTC unless it says otherwise; ``now`` is accepted."""
    if text == "now":
        return datetime.now(UTC)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO-8601 time (e.g. 2026-11-21T04:00Z)"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _windows(text: str) -> list[int]:
    try:
        seconds = sorted({parse_window(part) for part in text.split(",") if part.strip()})
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not seconds:
        raise argparse.ArgumentTypeError("at least one window is needed")
    return seconds


def _duration(text: str) -> timedelta:
    try:
        return timedelta(seconds=parse_window(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=_PROG, description="Spark rollups over the landing.")
    add = parser.add_argument
    add("--data-dir", required=True, help="kip714 data directory (local path or Hadoop URI)")
    add("--from", dest="start", type=_time, help="first time to roll up (ISO-8601, UTC)")
    add("--to", dest="end", type=_time, help="end of the range, exclusive (default: now)")
    add("--windows", type=_windows, default=_windows("1m,1h"), help="e.g. 1m,1h (default)")
    add("--master", help="Spark master URL (default: spark-submit's, else local[*])")
    add("--incremental", action="store_true", help="Structured Streaming, availableNow")
    add("--lateness", type=_duration, default=DEFAULT_LATENESS, help="default range; watermark")
    add("--top", type=int, default=10, help="clients per metric and hour in top_clients_1h")
    add("--top-by", default="p99", choices=("count", "avg", "max", "last", "p50", "p95", "p99"))
    add("--shuffle-partitions", type=int, default=4)
    add("--driver-memory", default="1g", help="when this process starts the JVM")
    add("--verbose", action="store_true", help="keep Spark's own log output on stderr")
    return parser.parse_args(argv)


def _range(args: argparse.Namespace, now: datetime) -> tuple[datetime, datetime]:
    """The run's range, widened to whole hours and to the largest window."""
    end: datetime = args.end or now
    start: datetime = args.start or (end - args.lateness)
    align = max(_HOUR, *args.windows)
    start_s = int(start.timestamp()) // align * align
    end_s = -(-int(end.timestamp()) // align) * align
    if end_s <= start_s:
        end_s = start_s + align
    return datetime.fromtimestamp(start_s, UTC), datetime.fromtimestamp(end_s, UTC)


def _read_written(
    spark: SparkSession, data_dir: str, name: str, start: datetime, end: datetime
) -> DataFrame | None:
    """The run's partitions of one output, read back (None if the run wrote none)."""
    path = io.rollup_path(data_dir, name)
    fs = HadoopFS(spark, path)
    dirs = [f"{path}/date={h:%Y-%m-%d}/hour={h:%H}" for h in io.hours_in(start, end)]
    present = [d for d in dirs if fs.exists(d)]
    if not present:
        return None
    return spark.read.option("basePath", path).parquet(*present).drop("date", "hour")


def run_batch(spark: SparkSession, args: argparse.Namespace, now: datetime) -> JobSummary:
    """Compute and write every rollup for the run's range."""
    start, end = _range(args, now)
    summary = JobSummary(start, end)
    # Cumulative points need their predecessor: read DEFAULT_LOOKBACK before the range.
    no_data = io.NoDataError(
        f"no landing data between {start:%Y-%m-%dT%H:%M}Z and {end:%Y-%m-%dT%H:%M}Z "
        f"under {io.landing_path(args.data_dir)}"
    )
    try:
        points = io.read_landing(spark, args.data_dir, start - DEFAULT_LOOKBACK, end)
    except io.NoDataError:
        raise no_data from None
    # One scan of the landing for the whole run: every rollup reads this projection.
    prepared = prepare_and_persist(points)
    rollups = None
    try:
        in_range = prepared.where(sf.col("time") >= sf.lit(start))
        summary.rows_read = in_range.count()  # also materialises the projection
        if summary.rows_read == 0:
            raise no_data
        rollups = plan_rollups(prepared, start, end, args.windows, top=args.top, top_by=args.top_by)
        for name, rollup in rollups.outputs.items():
            io.write_rollup(rollup, args.data_dir, name)
        for name in rollups.outputs:
            written = _read_written(spark, args.data_dir, name, start, end)
            summary.written[name] = 0 if written is None else written.count()
        summary.unrolled = [
            (r["metric_type"], r["reason"], r["points"])
            for r in unrolled_points(in_range).orderBy("metric_type", "reason").collect()
        ]
    finally:
        if rollups is not None:
            rollups.unpersist()
        prepared.unpersist()
    health = _read_written(spark, args.data_dir, "client_health_1h", start, end)
    if health is not None:
        worst = (
            health.where(sf.col("request_latency_p99_ms").isNotNull())
            .groupBy("client_id", "client_instance_id", "client_type")
            .agg(sf.max("request_latency_p99_ms").alias("p99"))
            .orderBy(sf.col("p99").desc(), "client_id", "client_instance_id")
            .limit(5)
            .collect()
        )
        summary.top_latency = [
            (str(r["client_id"]), str(r["client_instance_id"]), str(r["client_type"]), r["p99"])
            for r in worst
        ]
    return summary


def _is_missing_file(error: Exception) -> bool:
    """A landing file vanished under the job: a compaction swap raced the read."""
    text = str(error)
    return "FileNotFoundException" in text or "FILE_NOT_EXIST" in text


def _one_line(error: BaseException) -> str:
    """The first line a user can act on: the Java exception's message, not py4j's wrapper."""
    if isinstance(error, Py4JJavaError):
        text = str(error.java_exception.toString()).strip().splitlines()
    else:
        text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


@contextlib.contextmanager
def _jvm_stderr_to(path: str | None) -> Iterator[None]:
    """Let a JVM started inside this block inherit ``path`` as its stderr, not the terminal.

    The JVM prints a few lines (an incubator-module warning, early log4j
    output) before any logging configuration applies; they would drown the
    summary. The child keeps the file after the block; this process gets its
    terminal back.
    """
    if path is None:
        yield
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 2)
    os.close(log)
    try:
        yield
    finally:
        os.dup2(terminal, 2)
        os.close(terminal)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job; 0 on success, 2 for a usage or data error, 1 for a Spark failure."""
    args = parse_args(argv)
    if "://" not in args.data_dir and not os.path.isdir(args.data_dir):
        print(f"{_PROG}: error: data directory not found: {args.data_dir}", file=sys.stderr)
        return 2
    had_session = SparkSession.getActiveSession() is not None
    log_path = None
    if not had_session and not args.verbose and "PYSPARK_GATEWAY_PORT" not in os.environ:
        log_path = os.path.join(tempfile.gettempdir(), f"kip714-rollup-{os.getpid()}.log")
    with _jvm_stderr_to(log_path):
        spark = spark_session(
            args.master,
            shuffle_partitions=args.shuffle_partitions,
            driver_memory=args.driver_memory,
        )
    failed = True
    try:
        for attempt in range(_RETRIES + 1):
            try:
                if args.incremental:
                    print(
                        incremental.run(spark, args.data_dir, args.windows, args.lateness).render()
                    )
                else:
                    print(run_batch(spark, args, datetime.now(UTC)).render())
                failed = False
                return 0
            except (PySparkException, Py4JJavaError) as error:
                if attempt == _RETRIES or not _is_missing_file(error):
                    raise
        return 1  # pragma: no cover - the loop returns or raises
    except (io.DataDirNotFoundError, io.NoDataError, io.HourBusyError) as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return 2
    except (PySparkException, Py4JJavaError, OSError) as error:
        where = f" (Spark log: {log_path})" if log_path else ""
        print(f"{_PROG}: error: {_one_line(error)}{where}", file=sys.stderr)
        return 1
    finally:
        if not had_session:
            spark.stop()
        if log_path is not None and not failed:
            with contextlib.suppress(OSError):
                os.remove(log_path)


if __name__ == "__main__":
    sys.exit(main())
