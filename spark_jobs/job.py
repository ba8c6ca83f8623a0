"""The rollup job behind `kip714 rollup`, `python -m spark_jobs.job` and spark-submit.

All three take the same arguments (``main(argv)``). The job reads the landing
table as of its newest snapshot and replaces whole hours of every rollup
table (``gauges_1m`` … ``client_health_1h``), each in one Iceberg commit that
records the landing snapshot it was computed from.

Which hours: by default the current hour and the ``--lateness`` before it (2
hours), or ``--from/--to``. With ``--incremental``, the hours that the rows
appended since the last recorded landing snapshot fall in (late points
reopen their hour), plus the ``DEFAULT_LOOKBACK`` after each (a late
cumulative point changes its successor's delta).

Whether there is anything to do is decided from the lake's metadata with
pyiceberg before Spark starts (``metadata``), so an empty range costs no JVM.
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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from health_rules import RulesError, load_rules
from spark_jobs import metadata
from spark_jobs.lake import DEFAULT_NAMESPACE, Lake, NoDataError
from spark_jobs.spans import Range, merge_ranges, parse_window, window_label

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.run import JobSummary

__all__ = ["DEFAULT_LATENESS", "Plan", "main", "output_names", "parse_args", "plan"]

DEFAULT_LATENESS = timedelta(hours=2)
"""How far before the current hour a run without ``--from`` reaches back."""

_PROG = "kip714 rollup"
_HOUR = 3600
_DEFAULT_SHUFFLE_PARTITIONS = 4
_ROWS_PER_PARTITION = 500_000
_MAX_PARTITIONS = 32
_SMALL_INPUT_ROWS = 200_000
_SMALL_RUN_WRITERS = 2
"""A small run writes two outputs at a time: one thread's planning and commit
(driver work) overlap the other's, on a second core the tiny jobs leave idle
(1.3 s less on average over six noisy rounds, docs/rollups.md)."""


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Spark rollups over the lake.",
        epilog="kip714 rollup also takes --config FILE: the server's config, whose data_dir "
        "gives --data-dir and whose [lake] gives --catalog-uri, --warehouse and --namespace.",
    )
    add = parser.add_argument
    add(
        "--data-dir",
        help="kip714 data directory: the lake defaults to DIR/lake/ (default with kip714 "
        "rollup: --config's data_dir, else ./kip714-data)",
    )
    add(
        "--catalog-uri",
        help="the SQL catalog: a SQLite file or sqlite:///…, or a SQLAlchemy PostgreSQL URL "
        "postgresql+psycopg://user:password@host:port/db (default: DATA_DIR/lake/catalog.db)",
    )
    add("--warehouse", help="warehouse path or URI (default: DATA_DIR/lake/warehouse)")
    add(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"namespace of the kip714 tables (default: {DEFAULT_NAMESPACE})",
    )
    add("--from", dest="start", type=_time, help="first time to roll up (ISO-8601, UTC)")
    add("--to", dest="end", type=_time, help="end of the range, exclusive (default: now)")
    add("--windows", type=_windows, default=_windows("1m,1h"), help="e.g. 1m,1h (default)")
    add("--master", help="Spark master URL (default: spark-submit's, else local[*])")
    add("--incremental", action="store_true", help="only hours touched since the last run")
    add(
        "--lateness",
        type=_duration,
        default=DEFAULT_LATENESS,
        help=f"reach of the default range (default: {DEFAULT_LATENESS})",
    )
    add(
        "--top",
        type=int,
        default=10,
        help="clients per metric and hour in top_clients_1h (default: 10)",
    )
    add(
        "--top-by",
        default="p99",
        choices=("count", "avg", "max", "last", "p50", "p95", "p99"),
        help="what top_clients_1h ranks by (default: p99)",
    )
    add(
        "--alert-rules",
        metavar="FILE",
        help="health rules for client_alerts_1h (default: the shipped health_rules/rules.toml; "
        "kip714 rollup --config: its [alerts] rules)",
    )
    add("--shuffle-partitions", type=int, help="default: sized to the data (1 per ~500k points)")
    add("--driver-memory", default="1g", help="when this process starts the JVM (default: 1g)")
    add("--verbose", action="store_true", help="keep Spark's own log output on stderr")
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.catalog_uri is None or args.warehouse is None) and args.data_dir is None:
        parser.error("--data-dir is needed unless --catalog-uri and --warehouse are given")
    try:  # a bad rules file is refused before Spark starts
        args.rules = load_rules(Path(args.alert_rules) if args.alert_rules else None)
    except RulesError as error:
        parser.error(str(error))
    return args


def lake_of(args: argparse.Namespace) -> Lake:
    default = Lake.under(args.data_dir, args.namespace) if args.data_dir is not None else None
    return Lake(
        args.catalog_uri or (default.catalog_uri if default else ""),
        args.warehouse or (default.warehouse if default else ""),
        args.namespace,
    )


def output_names(windows: Sequence[int]) -> list[str]:
    """Every table a run writes, in write order."""
    names = [
        f"{kind}_{window_label(timedelta(seconds=w))}"
        for w in sorted(windows)
        for kind in ("gauges", "sums", "histograms")
    ]
    return [
        *names,
        "top_clients_1h",
        "client_health_1h",
        "client_inventory_1h",
        "client_alerts_1h",
        "quota_advice_1h",
    ]


def _align(args: argparse.Namespace) -> int:
    windows: list[int] = args.windows
    return max(_HOUR, *windows)


def _range(args: argparse.Namespace, now: datetime) -> Range:
    """The batch range, widened to whole hours and to the largest window."""
    end: datetime = args.end or now
    start: datetime = args.start or (end - args.lateness)
    align = _align(args)
    start_s = int(start.timestamp()) // align * align
    end_s = -(-int(end.timestamp()) // align) * align
    if end_s <= start_s:
        end_s = start_s + align
    return datetime.fromtimestamp(start_s, UTC), datetime.fromtimestamp(end_s, UTC)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run will do, decided from metadata alone (no JVM)."""

    lake: Lake
    snapshot_id: int
    ranges: list[Range]
    """Batch: the range to recompute. Incremental: empty until the appended rows are read."""
    appended_after: int | None = None
    """Incremental: the recorded landing snapshot to read appends after."""
    estimated_rows: int | None = None
    """Rows of the landing files the run may read (an upper bound), None if unknown."""
    existing_outputs: frozenset[str] | None = None
    """The output tables the pre-flight found (None: not known, the run asks the catalog)."""

    def shuffle_partitions(self, given: int | None) -> int:
        """``given``, else sized to the data: one per ~500k rows, 1 to 32.

        Why: on a small run every extra shuffle partition is a task with a fixed
        cost and nothing to do; AQE coalesces after the fact but still plans them.
        On a large one every rollup task sorts or hashes its whole partition
        (each rollup shuffles its points once, ``pipeline.prepare_partitioned``):
        at 2M points per partition the 1-minute gauges spilled 6.7 GB with a
        1 GiB driver, so partitions stay near 500k points.
        """
        if given is not None:
            return given
        if self.estimated_rows is None:
            return _DEFAULT_SHUFFLE_PARTITIONS
        return max(1, min(_MAX_PARTITIONS, -(-self.estimated_rows // _ROWS_PER_PARTITION)))

    @property
    def small_input(self) -> bool:
        """At most ~200k rows to read: the session starts with ``session.SMALL_INPUT_CONF``."""
        return self.estimated_rows is not None and self.estimated_rows <= _SMALL_INPUT_ROWS


class NothingNewError(LookupError):
    """An incremental run found no rows appended since the last recorded snapshot."""


def _incremental_rows(lake: Lake, snapshot_id: int, appends: list[int], align: int) -> int | None:
    """Rows of the landing files around the appended rows: an upper bound of what the run reads.

    The span of the appended files' ``time``, widened to whole ``align``
    periods plus one before (the lookback, at most an hour) and two after
    (the period after each touched one, whose deltas a late point changes).
    """
    reach = metadata.appended_reach(lake, appends)
    if reach is None:
        return None
    start_s = int(reach[0].timestamp()) // align * align - align
    end_s = (int(reach[1].timestamp()) // align + 3) * align
    span = (datetime.fromtimestamp(start_s, UTC), datetime.fromtimestamp(end_s, UTC))
    return metadata.rows_in(lake, snapshot_id, [span])


def plan(args: argparse.Namespace, now: datetime) -> Plan:
    """Decide the run from the lake's metadata.

    Raises:
        NoDataError: no landing, or no point in the batch range.
        NothingNewError: ``--incremental`` and nothing appended since the last run.
    """
    lake = lake_of(args)
    state = metadata.lake_state(lake, output_names(args.windows))
    if args.incremental and state.appended_since is not None:
        if not state.appended_since:
            raise NothingNewError(
                f"nothing appended to the landing since snapshot {state.landing_snapshot_id}"
            )
        recorded = next(iter(state.recorded.values()))
        return Plan(
            lake,
            state.landing_snapshot_id,
            [],
            appended_after=recorded,
            estimated_rows=_incremental_rows(
                lake, state.landing_snapshot_id, state.appended_since, _align(args)
            ),
            existing_outputs=state.existing,
        )
    start, end = _range(args, now)
    rows = metadata.rows_in(lake, state.landing_snapshot_id, [(start, end)])
    if rows == 0:
        raise NoDataError(
            f"no landing data between {start:%Y-%m-%dT%H:%M}Z and {end:%Y-%m-%dT%H:%M}Z "
            f"in {lake.landing}"
        )
    return Plan(
        lake,
        state.landing_snapshot_id,
        [(start, end)],
        estimated_rows=rows,
        existing_outputs=state.existing,
    )


def execute(spark: SparkSession, args: argparse.Namespace, run_plan: Plan) -> JobSummary:
    """The Spark part of a run (PySpark is imported only once there is work)."""
    from spark_jobs import io  # noqa: PLC0415
    from spark_jobs.rollups import DEFAULT_LOOKBACK  # noqa: PLC0415
    from spark_jobs.run import run_rollups  # noqa: PLC0415

    ranges = run_plan.ranges
    if run_plan.appended_after is not None:
        appended = io.read_appended(
            spark, run_plan.lake, run_plan.appended_after, run_plan.snapshot_id
        )
        align = _align(args)
        starts = {
            datetime.fromtimestamp(int(h.timestamp()) // align * align, UTC)
            for h in io.touched_hours(appended)
        }
        ranges = merge_ranges((s, s + timedelta(seconds=align) + DEFAULT_LOOKBACK) for s in starts)
        ranges = [(s, datetime.fromtimestamp(
            -(-int(e.timestamp()) // align) * align, UTC)) for s, e in ranges]  # fmt: skip
    return run_rollups(
        spark,
        run_plan.lake,
        run_plan.snapshot_id,
        ranges,
        args.windows,
        output_names(args.windows),
        top=args.top,
        top_by=args.top_by,
        rules=args.rules,
        incremental_after=run_plan.appended_after,
        existing=run_plan.existing_outputs,
        writers=_SMALL_RUN_WRITERS if run_plan.small_input else 1,
    )


def _one_line(error: BaseException) -> str:
    """The first line a user can act on: the Java exception's message, not py4j's wrapper."""
    java = getattr(error, "java_exception", None)  # py4j's Py4JJavaError
    text = str(error if java is None else java.toString()).strip().splitlines()
    return text[0] if text else type(error).__name__


@contextlib.contextmanager
def _jvm_output_to(path: str | None) -> Iterator[None]:
    """Let a JVM started inside this block inherit ``path`` as its stdout and stderr, not ours.

    The JVM prints a few lines (an incubator-module warning, early log4j
    output) before any logging configuration applies; they would drown the
    summary. And a JVM that writes its class archive when it exits
    (``spark_jobs.class_archive``) outlives this process by seconds: holding
    our stdout, it would keep a pipe reading the summary open that long. The
    child keeps the file after the block; this process gets its own back.
    """
    if path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd in saved:
        os.dup2(log, fd)
    os.close(log)
    try:
        yield
    finally:
        for fd, original in saved.items():
            os.dup2(original, fd)
            os.close(original)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job; 0 on success (or nothing new), 2 for a usage or data error, 1 for a failure."""
    args = parse_args(argv)
    local = args.data_dir is not None and "://" not in args.data_dir
    if local and not os.path.isdir(args.data_dir):
        print(f"{_PROG}: error: data directory not found: {args.data_dir}", file=sys.stderr)
        return 2
    try:
        run_plan = plan(args, datetime.now(UTC))
    except NothingNewError as error:
        print(f"{_PROG} --incremental: {error}")
        return 0
    except (NoDataError, ValueError) as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return 2
    return _run_in_spark(args, run_plan)


def _run_in_spark(args: argparse.Namespace, run_plan: Plan) -> int:
    """Start (or join) the session and run; PySpark and py4j load only here."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]  # noqa: PLC0415
    from pyspark.errors import PySparkException  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: PLC0415

    from spark_jobs.jars import JarsUnavailableError  # noqa: PLC0415
    from spark_jobs.session import spark_session  # noqa: PLC0415

    had_session = SparkSession.getActiveSession() is not None
    log_path = None
    if not had_session and not args.verbose and "PYSPARK_GATEWAY_PORT" not in os.environ:
        log_path = os.path.join(tempfile.gettempdir(), f"kip714-rollup-{os.getpid()}.log")
    failed = True
    spark = None
    try:
        with _jvm_output_to(log_path):
            spark = spark_session(
                args.master,
                lake=run_plan.lake,
                shuffle_partitions=run_plan.shuffle_partitions(args.shuffle_partitions),
                driver_memory=args.driver_memory,
                small_input=run_plan.small_input,
                class_archive=True,
            )
        print(execute(spark, args, run_plan).render())
        failed = False
        return 0
    except JarsUnavailableError as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return 1
    except (PySparkException, Py4JJavaError, OSError) as error:
        where = f" (Spark log: {log_path})" if log_path else ""
        print(f"{_PROG}: error: {_one_line(error)}{where}", file=sys.stderr)
        return 1
    finally:
        if spark is not None and not had_session:
            spark.stop()
        if log_path is not None and not failed:
            with contextlib.suppress(OSError):
                os.remove(log_path)


if __name__ == "__main__":
    sys.exit(main())
