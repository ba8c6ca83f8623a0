"""``kip714 report [--config FILE] [--data-dir DIR] [--from TIME] [--to TIME] --out FILE``."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from report.html import render
from report.lake import NAMESPACE, RollupLake, read_rollup
from report.model import GAUGE_METRICS, build

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["build_parser", "main", "write_report"]

#: The gauge rollups charts are drawn from, finest first.
_GAUGE_TABLES = ("gauges_1m", "gauges_1h")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip714 report",
        description=(
            "Write a self-contained HTML client-health report (a table and per-client charts "
            "of request latency, queue time, throttle time and connection creation rate, worst "
            "p99 first) from the rollup tables of the lake. Run kip714 rollup first. "
            "kip714 report --config FILE reads the catalog the server's [lake] names "
            "(SQLite or PostgreSQL), as kip714 rollup does."
        ),
    )
    parser.add_argument(
        "--data-dir", type=Path, help="the kip714 data directory (its lake is the default)"
    )
    parser.add_argument(
        "--catalog-uri",
        help="the SQL catalog: sqlite:///FILE or a SQLAlchemy PostgreSQL URL "
        "(default: DATA_DIR/lake/catalog.db)",
    )
    parser.add_argument(
        "--warehouse", help="warehouse path or URI (default: DATA_DIR/lake/warehouse)"
    )
    parser.add_argument("--namespace", default=NAMESPACE, help="namespace of the kip714 tables")
    parser.add_argument("--from", dest="start", type=_time, help="first hour (ISO-8601, UTC)")
    parser.add_argument("--to", dest="end", type=_time, help="end of the range, exclusive")
    parser.add_argument("--out", required=True, type=Path, help="the HTML file to write")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.data_dir is None and (args.catalog_uri is None or args.warehouse is None):
        parser.error("--data-dir is needed unless --catalog-uri and --warehouse are given")
    if args.data_dir is not None and not args.data_dir.is_dir():
        print(f"kip714 report: no data directory {args.data_dir}", file=sys.stderr)
        return 2
    lake = None
    if args.catalog_uri is not None or args.warehouse is not None:
        default = RollupLake.under(args.data_dir) if args.data_dir is not None else None
        lake = RollupLake(
            args.catalog_uri or (default.catalog_uri if default else ""),
            args.warehouse or (default.warehouse if default else ""),
            args.namespace,
        )
    elif args.data_dir is not None and args.namespace != NAMESPACE:
        lake = RollupLake.under(args.data_dir, args.namespace)
    clients = write_report(args.data_dir, args.out, args.start, args.end, lake)
    print(f"kip714 report: {clients} client instance(s) -> {args.out.resolve()}")
    return 0


def write_report(
    data_dir: Path | None,
    out: Path,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    lake: RollupLake | None = None,
) -> int:
    """Render the report for ``data_dir`` (or ``lake``) into ``out``; how many clients it shows."""
    health = read_rollup(data_dir, "client_health_1h", start, end, lake=lake)
    sources = ["client_health_1h"] if health is not None else []
    gauges = None
    for name in _GAUGE_TABLES:
        gauges = read_rollup(data_dir, name, start, end, GAUGE_METRICS, lake)
        if gauges is not None:
            sources.append(name)
            break
    clients = build(health, gauges)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.tmp")
    temporary.write_text(render(clients, start, end, ", ".join(sources) or "no tables"))
    temporary.replace(out)
    return len(clients)


def _time(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {text!r}") from error
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)
