"""``kip714 lake``: see and tend the Iceberg landing without writing code.

The lake is found the way ``kip714 serve`` finds it: ``--config`` (its
``[lake]`` section or an ``iceberg`` exporter's options) and ``--data-dir``
(default ``./kip714-data``; the lake defaults to ``<data_dir>/lake/``), given
before or after the verb. A path with no lake is refused unless ``--create``:
a mistyped ``--data-dir`` must not answer "nothing landed yet" from an empty
lake it just made. Every command is a client of the catalog: it works beside
running servers, and what it changes is an ordinary Iceberg commit. Errors
are one line and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from exporters.iceberg.import_parquet import import_parquet
from exporters.iceberg.lake import lake_location, open_catalog, open_table
from exporters.iceberg.maintenance import (
    MaintenanceStats,
    compact,
    expire_snapshots,
    remove_orphan_files,
)
from exporters.iceberg.schema import METRICS_TABLE, PUSHES_TABLE
from report.lake import table_view
from telemetry.cli.common import HelpFormatter, add_location, location_of
from telemetry.errors import ConfigError
from telemetry.server.config import load_settings
from telemetry.server.config_paths import resolve_relative_paths
from telemetry.server.lake_settings import LAKE_EXPORTER_TYPE, lake_options

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from exporters.iceberg.lake import LakeLocation

__all__ = ["main"]

_PROG = "kip714 lake"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Look at the Iceberg landing (tables, snapshots, SQL) and maintain it.\n"
        "A path with no lake is refused (exit 2) unless --create is given.",
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )

    verbs = [
        verb("tables", "every table of the lake's namespace: rows, files, snapshots, location"),
        snapshots := verb("snapshots", "a table's snapshots, newest first"),
        compact_cmd := verb(
            "compact",
            "rewrite each closed receive hour of the landing tables with several files as one "
            "sorted file",
        ),
        expire := verb(
            "expire",
            "expire the landing tables' old snapshots, then delete files no snapshot references",
        ),
        query := verb(
            "query",
            "run SQL with DuckDB; every table of the namespace is a view of its name "
            "(kip714 lake tables lists them), read only where the SQL needs it",
        ),
        importer := verb(
            "import-parquet", "append a parquet landing's files (DIR/metrics/) to the lake, once"
        ),
    ]
    snapshots.add_argument("--table", default=METRICS_TABLE, help="the table's name")
    snapshots.add_argument("--limit", type=int, default=20, help="at most this many")
    compact_cmd.add_argument(
        "--after-hours", type=int, default=1, help="hours an hour must be over"
    )
    expire.add_argument(
        "--older-than-hours",
        type=int,
        required=True,
        metavar="N",
        help="expire snapshots and delete unreferenced files older than N hours (N >= 1)",
    )
    query.add_argument("sql", help="the SQL statement")
    query.add_argument(
        "--where",
        metavar="FILTER",
        help="an Iceberg row filter applied to every table that has the columns it names, "
        "e.g. \"received_time >= '2026-11-25'\"",
    )
    importer.add_argument("--from", dest="source", metavar="DIR", help="default: --data-dir")
    add_location([parser, *verbs])
    for each in (parser, *verbs):
        each.add_argument(
            "--create",
            action="store_true",
            default=argparse.SUPPRESS,
            help="make an empty lake where there is none (default: refuse, exit 2)",
        )
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        config, data_dir_text = location_of(args)
        location, data_dir, node_id = _lake_of(config, data_dir_text)
        if not getattr(args, "create", False):
            refuse_missing_lake(location, data_dir)
        catalog = open_catalog(location)
        if args.command == "import-parquet":
            source = Path(args.source) if args.source else data_dir
            return import_command(catalog, location, source, node_id or _node_of(source))
        commands = {
            "tables": lambda: tables(catalog, location),
            "snapshots": lambda: snapshots(_table(catalog, location, args.table), args.limit),
            "compact": lambda: compact_tables(catalog, location, args.after_hours),
            "expire": lambda: expire(catalog, location, args.older_than_hours),
            "query": lambda: query(catalog, location, args.sql, args.where),
        }
        return commands[args.command]()
    except (ConfigError, NoSuchTableError, OSError, ValueError, LakeMissingError) as error:
        print(f"{_PROG} {args.command}: {error}", file=sys.stderr)
        return 2


class LakeMissingError(Exception):
    """No lake where the command looked: most likely a mistyped --data-dir or --config."""


def refuse_missing_lake(location: LakeLocation, data_dir: Path) -> None:
    """A lake exists when its catalog has the namespace; looking never creates one.

    For a catalog on SQLite, the catalog file must exist first: opening it
    would create it (and an empty lake where the operator mistyped a path).
    """
    uri = str(location.catalog.get("uri", ""))
    if location.catalog.get("type", "sql") == "sql" and uri.startswith("sqlite:///"):
        database = Path(uri.removeprefix("sqlite:///"))
        if not database.is_file():
            raise LakeMissingError(
                f"no lake at {database.parent} (no catalog {database}; data directory "
                f"{data_dir.absolute()}): check --data-dir and --config, or pass --create "
                "to make an empty lake there"
            )
    catalog = open_catalog(location)
    try:
        catalog.load_namespace_properties(location.namespace)
    except NoSuchNamespaceError:
        raise LakeMissingError(
            f"no lake in catalog {uri or location.catalog}: it has no namespace "
            f"{location.namespace!r} (check --config, or pass --create)"
        ) from None


def _lake_of(config: str | None, data_dir: str | None) -> tuple[LakeLocation, Path, str | None]:
    """The lake, the data directory and the configured node id, as ``kip714 serve`` sees them."""
    settings = load_settings(config, data_dir=data_dir)
    for exporter in settings.exporters:
        if exporter.type == LAKE_EXPORTER_TYPE:
            options = exporter.options
            path = options.get("path")
            return (
                lake_location(options, Path(path) if path else settings.data_dir),
                settings.data_dir,
                options.get("node_id"),
            )
    import tomllib  # noqa: PLC0415 -- only a config without an iceberg exporter needs it

    document: dict[str, Any] = {}
    if config is not None:
        document = resolve_relative_paths(tomllib.loads(Path(config).read_text()), Path(config))
    options = lake_options(document)
    return lake_location(options, settings.data_dir), settings.data_dir, options.get("node_id")


def _node_of(data_dir: Path) -> str:
    from exporters.iceberg.exporter import node_id_in  # noqa: PLC0415

    return node_id_in(data_dir)


def _table(catalog: Catalog, location: LakeLocation, name: str) -> Table:
    return catalog.load_table((location.namespace, name))


def _existing(catalog: Catalog, location: LakeLocation) -> list[Table]:
    """The landing's tables (``metrics``, ``pushes``): what compact and expire tend."""
    found = []
    for name in (METRICS_TABLE, PUSHES_TABLE):
        try:
            found.append(_table(catalog, location, name))
        except NoSuchTableError:
            continue
    return found


def _every_table(catalog: Catalog, location: LakeLocation) -> list[Table]:
    """Every table of the namespace: the landing's and the rollups'."""
    try:
        identifiers = catalog.list_tables(location.namespace)
    except NoSuchNamespaceError:
        return []
    found = []
    for identifier in sorted(identifiers):
        try:
            found.append(catalog.load_table(identifier))
        except NoSuchTableError:  # dropped meanwhile
            continue
    return found


def tables(catalog: Catalog, location: LakeLocation) -> int:
    found = _every_table(catalog, location)
    if not found:
        print(f"no tables in namespace {location.namespace} (nothing landed yet)")
    for table in found:
        current = table.current_snapshot()
        summary = current.summary.additional_properties if current and current.summary else {}
        print(
            f"{'.'.join(table.name())}: {summary.get('total-records', '0')} rows, "
            f"{summary.get('total-data-files', '0')} files, "
            f"{len(table.metadata.snapshots)} snapshots, {table.location()}"
        )
    return 0


def snapshots(table: Table, limit: int) -> int:
    history = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms, reverse=True)
    for snapshot in history[:limit]:
        summary = snapshot.summary
        props = summary.additional_properties if summary else {}
        when = dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, dt.UTC)
        node = props.get("kip714.node-id")
        offsets = f"{props.get('kip714.offset-start')}..{props.get('kip714.offset-end')}"
        what = f"node {node} offsets {offsets}" if node else "maintenance or import"
        operation = summary.operation.value if summary else "?"
        print(
            f"{snapshot.snapshot_id}  {when:%Y-%m-%d %H:%M:%S}Z  {operation:<9} "
            f"+{props.get('added-records', '0')} rows  {what}"
        )
    return 0


def compact_tables(catalog: Catalog, location: LakeLocation, after_hours: int) -> int:
    stats = MaintenanceStats()
    for table in _existing(catalog, location):
        compact(table, after_hours, int(time.time() * 1000), stats)
    print(
        f"compacted {stats.hours_compacted} hour(s), {stats.files_compacted} file(s) rewritten"
        + (f"; {stats.conflicts} hour(s) changed meanwhile, retry later" if stats.conflicts else "")
    )
    return 0


def expire(catalog: Catalog, location: LakeLocation, older_than_hours: int) -> int:
    if older_than_hours < 1:
        raise ValueError("--older-than-hours must be at least 1")
    now_ms = int(time.time() * 1000)
    expired = removed = 0
    for table in _existing(catalog, location):
        expired += expire_snapshots(table, older_than_hours, now_ms)
        removed += remove_orphan_files(table.refresh(), older_than_hours, now_ms)
    print(f"expired {expired} snapshot(s), deleted {removed} unreferenced file(s)")
    return 0


def query(catalog: Catalog, location: LakeLocation, sql: str, where: str | None) -> int:
    import duckdb  # noqa: PLC0415 -- only this command needs DuckDB

    connection = duckdb.connect()
    for table in _every_table(catalog, location):
        # Lazy: DuckDB pulls only the columns and row groups the SQL needs.
        connection.register(table.name()[-1], table_view(table, _filter_for(table, where)))
    try:
        result: Any = connection.sql(sql)  # None for a statement without rows
        if result is None:
            return 0
        columns = result.columns
        rows = result.fetchall()  # the tables are read here, as far as the SQL needs
    except duckdb.Error as error:
        raise ValueError(f"DuckDB: {' '.join(str(error).split())}") from error
    print("\t".join(columns))
    for row in rows:
        print("\t".join("" if v is None else str(v) for v in row))
    return 0


def _filter_for(table: Table, where: str | None) -> str | None:
    """``--where`` for the tables that have the columns it names (rollups lack the landing's)."""
    if where is None:
        return None
    from pyiceberg.expressions.parser import parse  # noqa: PLC0415
    from pyiceberg.expressions.visitors import bind  # noqa: PLC0415

    try:
        bind(table.schema(), parse(where), case_sensitive=True)
    except ValueError:
        return None
    return where


def import_command(catalog: Catalog, location: LakeLocation, source: Path, node_id: str) -> int:
    table = open_table(catalog, location.namespace, METRICS_TABLE)
    report = import_parquet(table, source, node_id)
    print(
        f"imported {report.files_imported} file(s) ({report.rows} rows, {report.commits} "
        f"commit(s)); {report.files_skipped} already imported"
        + (
            f"; {report.refused_counts} data point(s) refused (count > 2^63-1)"
            if report.refused_counts
            else ""
        )
    )
    return 0


def lake_rows(
    config: str | None,
    data_dir: str | None,
    metric_names: list[str] | None,
    span: tuple[dt.datetime | None, dt.datetime | None],
    columns: Sequence[str],
    *,
    time_column: str = "time",
    missing_ok: bool = False,
) -> list[dict[str, Any]] | None:
    """``columns`` of the metrics table's rows of ``metric_names`` (``None``: every metric)
    with ``start <= time_column < end``.

    ``None`` (after one line on stderr) when there is no lake: for commands that read it,
    such as ``kip714 quotas advise``. Reads only those columns, and only the files whose
    statistics can hold such rows. With ``missing_ok``, a table without one of ``columns``
    (written before it was added) answers no rows.
    """
    try:
        location, directory, _ = _lake_of(config, data_dir)
        refuse_missing_lake(location, directory)
        table = _table(open_catalog(location), location, METRICS_TABLE)
    except (ConfigError, NoSuchTableError, OSError, ValueError, LakeMissingError) as error:
        print(f"kip714: {error}", file=sys.stderr)
        return None
    if missing_ok and not set(columns) <= set(table.schema().column_names):
        return []
    conditions = []
    if metric_names is not None:
        names = ", ".join("'" + name.replace("'", "''") + "'" for name in metric_names)
        conditions.append(f"metric_name in ({names})")
    start, end = span
    if start is not None:
        conditions.append(f"{time_column} >= '{start.isoformat()}'")
    if end is not None:
        conditions.append(f"{time_column} < '{end.isoformat()}'")
    condition = " and ".join(conditions) or "true"
    rows: list[dict[str, Any]] = (
        table.scan(row_filter=condition, selected_fields=tuple(columns)).to_arrow().to_pylist()
    )
    return rows
