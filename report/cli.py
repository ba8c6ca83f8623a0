"""``kip714 report [--config FILE] [--data-dir DIR] [--from TIME] [--to TIME] --out FILE``.

The rollup tables are read from the lake under ``--data-dir``, or from the
catalog ``--catalog-uri`` and ``--warehouse`` name (``kip714 report --config``
passes the server's ``[lake]`` so: a SQLite file or a PostgreSQL database).

Exit status 2 with one line when there is nothing to report from (no data
directory, no rollup table: ``kip714 rollup`` has not run) or ``--out``'s
directory does not exist (it is never created: a mistyped path must not
leave directories behind). Tables present but no rows in the range: the
report is written, stderr says so, exit 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from health_rules import RulesError, load_rules
from report.html import render
from report.lake import NAMESPACE, RollupLake, gauge_tables, read_rollup, rollup_tables
from report.model import GAUGE_METRICS, build

if TYPE_CHECKING:
    from collections.abc import Sequence

    from health_rules import RuleSet

__all__ = [
    "DEFAULT_DATA_DIR",
    "build_parser",
    "describe_period",
    "iso_time",
    "main",
    "write_report",
]

#: The server's default ``--data-dir`` (``telemetry.server.config``, not importable from here).
DEFAULT_DATA_DIR = "./kip714-data"

#: The per-client hourly tables the report opens on.
_CLIENT_TABLES = ("client_inventory_1h", "client_health_1h", "client_alerts_1h")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip714 report",
        description=(
            "Write a self-contained HTML client-health report from the rollup tables of a data "
            "directory: the fleet first (inventory, health states, the period's alerts, worst "
            "first), then each client with its alerts and charts from the finest gauge rollup. "
            "Run kip714 rollup first."
        ),
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="the server's TOML configuration: kip714 report takes its data_dir (relative to "
        "the file's directory) as the default --data-dir and its [lake] as the catalog "
        "(default: none)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="the kip714 data directory (default: --config's data_dir, else ./kip714-data; "
        "not needed when --catalog-uri and --warehouse are given)",
    )
    parser.add_argument(
        "--catalog-uri",
        help="the SQL catalog: sqlite:///FILE or a SQLAlchemy PostgreSQL URL "
        "(default: DATA_DIR/lake/catalog.db)",
    )
    parser.add_argument(
        "--warehouse", help="warehouse path or URI (default: DATA_DIR/lake/warehouse)"
    )
    parser.add_argument(
        "--namespace",
        default=NAMESPACE,
        help=f"namespace of the kip714 tables (default: {NAMESPACE})",
    )
    parser.add_argument(
        "--from",
        dest="start",
        type=iso_time,
        help="first hour (ISO-8601, UTC; default: the data's first hour)",
    )
    parser.add_argument(
        "--to",
        dest="end",
        type=iso_time,
        help="end of the range, exclusive (default: after the data's last hour)",
    )
    parser.add_argument(
        "--alert-rules",
        metavar="FILE",
        help="the health rules whose one-line meanings the alerts show (default: the shipped "
        "rules; kip714 report --config passes [alerts] rules)",
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="the HTML file to write (its directory must exist)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    lake = _lake(args)
    data_dir: Path | None = args.data_dir
    if data_dir is None and lake is None:
        data_dir = Path(DEFAULT_DATA_DIR)
    if data_dir is not None and not data_dir.is_dir():
        print(f"kip714 report: no data directory {data_dir}", file=sys.stderr)
        return 2
    if not args.out.parent.is_dir():
        print(
            f"kip714 report: --out {args.out}: no directory {args.out.parent} "
            "(it is not created; make it or choose another path)",
            file=sys.stderr,
        )
        return 2
    try:
        rules = load_rules(Path(args.alert_rules) if args.alert_rules else None)
    except (OSError, RulesError) as error:
        print(f"kip714 report: --alert-rules: {error}", file=sys.stderr)
        return 2
    if not rollup_tables(data_dir, _CLIENT_TABLES, lake) and not gauge_tables(data_dir, lake):
        where = lake.catalog_uri if lake is not None and data_dir is None else data_dir
        where = where.absolute() if isinstance(where, Path) else where
        print(
            f"kip714 report: no rollup tables in {where} (run kip714 rollup first)",
            file=sys.stderr,
        )
        return 2
    clients = write_report(data_dir, args.out, args.start, args.end, lake, rules)
    if not clients:
        print(
            "kip714 report: the rollup tables hold no rows in this range; the report says so",
            file=sys.stderr,
        )
    print(f"kip714 report: {clients} client instance(s) -> {args.out.resolve()}")
    return 0


def _lake(args: argparse.Namespace) -> RollupLake | None:
    """The catalog named on the command line; ``None``: the lake under the data directory."""
    if args.catalog_uri is None and args.warehouse is None:
        if args.data_dir is not None and args.namespace != NAMESPACE:
            return RollupLake.under(args.data_dir, args.namespace)
        return None
    default = RollupLake.under(args.data_dir or Path(DEFAULT_DATA_DIR), args.namespace)
    return RollupLake(
        args.catalog_uri or default.catalog_uri, args.warehouse or default.warehouse, args.namespace
    )


def write_report(
    data_dir: Path | None,
    out: Path,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    lake: RollupLake | None = None,
    rules: RuleSet | None = None,
) -> int:
    """Render the report for ``data_dir`` (or ``lake``) into ``out``; how many clients it shows.

    Without ``start``/``end``, the period shown is the data's first and last hour.
    ``rules``: whose meanings the alerts show (the shipped rules when ``None``).
    """
    tables = {name: read_rollup(data_dir, name, start, end, lake=lake) for name in _CLIENT_TABLES}
    sources = [name for name, table in tables.items() if table is not None]
    gauges, window = None, None
    for name in gauge_tables(data_dir, lake):  # the finest window there is
        gauges = read_rollup(data_dir, name, start, end, GAUGE_METRICS, lake=lake)
        if gauges is not None:
            sources.append(name)
            window = name.removeprefix("gauges_")
            break
    quota_advice = read_rollup(data_dir, "quota_advice_1h", start, end, lake=lake)
    if quota_advice is not None:
        sources.append("quota_advice_1h")
    fleet = build(
        quota_advice=quota_advice,
        inventory=tables["client_inventory_1h"],
        health=tables["client_health_1h"],
        alerts=tables["client_alerts_1h"],
        gauges=gauges,
        rules=rules if rules is not None else load_rules(),
        window=window,
    )
    temporary = out.with_name(f".{out.name}.tmp")
    period = describe_period(start, end, _data_hours(*tables.values(), gauges))
    temporary.write_text(render(fleet, period, ", ".join(sources) or "no tables"))
    temporary.replace(out)
    return len(fleet.clients)


def _data_hours(*tables: pa.Table | None) -> tuple[dt.datetime, dt.datetime] | None:
    """The first and the last hour that ``window_start`` falls in, over every table."""
    moments = [
        moment
        for table in tables
        if table is not None and table.num_rows
        for moment in (pc.min(table["window_start"]).as_py(), pc.max(table["window_start"]).as_py())
        if moment is not None
    ]
    if not moments:
        return None
    hour = dt.timedelta(hours=1)
    first, last = min(moments), max(moments)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return epoch + (first - epoch) // hour * hour, epoch + (last - epoch) // hour * hour


def describe_period(
    start: dt.datetime | None,
    end: dt.datetime | None,
    data_hours: tuple[dt.datetime, dt.datetime] | None,
) -> str:
    """What the title says the report covers: the range asked for, else the data's hours."""
    if start is not None and end is not None:
        return f"{_when(start)} to {_when(end)}"
    if data_hours is None:
        asked = (
            f"from {_when(start)}"
            if start is not None
            else f"before {_when(end)}"
            if end is not None
            else ""
        )
        return f"no rollup rows {asked}".strip()
    first, last = data_hours
    if start is None and end is None:
        return f"{_when(first)} to {_when(last)} (the data's first and last hour)"
    if start is None:
        return f"{_when(first)} (the data's first hour) to {_when(end)}"
    return f"{_when(start)} to {_when(last)} (the data's last hour)"


def _when(moment: dt.datetime | None) -> str:
    assert moment is not None
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def iso_time(text: str) -> dt.datetime:
    """An argparse type: ISO-8601, UTC when it names no zone (``--from``/``--to``)."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {text!r}") from error
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)
