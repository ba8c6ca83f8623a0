"""Append a Parquet landing's published files to the lake, once.

The files under ``<data_dir>/metrics/`` (the ``parquet`` exporter's
Hive-partitioned landing) are read file by file, turned into ``metrics``
rows (counts as ``long``, ``node_id`` decoded, ``ingest_node`` the data
directory's node) and appended. Each commit records the names of the files
it imported in its snapshot properties (``kip714.imported-files``); a rerun
skips every name a retained snapshot already records, so importing twice
lands each file once. A crash between writing and committing leaves only
orphan files (removed by orphan cleanup), and the next run imports those
files again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.parquet as pq

from exporters.iceberg.schema import concat, lake_metrics_schema, to_lake_rows
from exporters.parquet.schema import metrics_schema

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.table import Table

__all__ = ["IMPORTED_FILES", "ImportReport", "import_parquet"]

IMPORTED_FILES: Final = "kip714.imported-files"
#: Files per commit: bounds the memory of one append and the size of its properties.
FILES_PER_COMMIT: Final = 64


@dataclass(slots=True)
class ImportReport:
    files_imported: int = 0
    files_skipped: int = 0
    rows: int = 0
    refused_counts: int = 0
    commits: int = 0


def imported_names(table: Table) -> set[str]:
    """Every file name a retained snapshot records as imported."""
    names: set[str] = set()
    for snapshot in table.metadata.snapshots:
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if IMPORTED_FILES in props:
            names.update(json.loads(props[IMPORTED_FILES]))
    return names


def import_parquet(table: Table, data_dir: Path, node_id: str) -> ImportReport:
    """Append every published file of ``data_dir/metrics`` the table does not record yet."""
    root = data_dir / "metrics"
    files = sorted(p for p in root.rglob("*.parquet") if "_landing" not in p.parts)
    done = imported_names(table)
    report = ImportReport()
    todo = []
    for path in files:
        name = str(path.relative_to(data_dir))
        if name in done:
            report.files_skipped += 1
        else:
            todo.append((name, path))
    for start in range(0, len(todo), FILES_PER_COMMIT):
        chunk = todo[start : start + FILES_PER_COMMIT]
        tables: list[pa.Table] = []
        for _, path in chunk:
            landed = pq.read_table(path, schema=metrics_schema())
            rows, refused = to_lake_rows(landed, node_id)
            report.refused_counts += refused
            tables.append(rows)
        rows = concat(tables, lake_metrics_schema())
        names = json.dumps([name for name, _ in chunk])
        table.append(rows, snapshot_properties={IMPORTED_FILES: names})
        report.files_imported += len(chunk)
        report.rows += rows.num_rows
        report.commits += 1
    return report
