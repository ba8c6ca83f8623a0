"""Old data directories: append a retired Parquet landing's files to the lake, once.

Versions before the Iceberg table was the only landing offered a ``parquet``
exporter: Hive-partitioned files under ``<data_dir>/metrics/`` and, under
``<data_dir>/_landing/manifests/``, one JSON manifest per publication. This
module keeps its own copy of what it needs of that format (the manifest
reader and the row schema), so the landing never depends on it.

``import_parquet`` reads the files one by one, turned into ``metrics``
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

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.table import Table

__all__ = [
    "IMPORTED_FILES",
    "ImportReport",
    "import_parquet",
    "parquet_landing_position",
    "parquet_metrics_schema",
]

IMPORTED_FILES: Final = "kip714.imported-files"
#: Files per commit: bounds the memory of one append and the size of its properties.
FILES_PER_COMMIT: Final = 64
#: Where the Parquet landing kept its manifests, relative to its data directory.
MANIFEST_DIR: Final = ("_landing", "manifests")
#: Manifest versions it wrote (1: before log ids existed).
_MANIFEST_VERSIONS: Final = frozenset({1, 2})


def parquet_metrics_schema() -> pa.Schema:
    """The Parquet landing's ``metrics`` rows as its files hold them (frozen, never changes)."""
    ts = pa.timestamp("us", tz="UTC")
    text = pa.string()
    string_map = pa.map_(text, text)
    counts = pa.list_(pa.uint64())
    doubles = pa.list_(pa.float64())
    return pa.schema(
        [
            ("time", ts),
            ("start_time", ts),
            ("received_time", ts),
            ("client_instance_id", text),
            ("client_id", text),
            ("client_software_name", text),
            ("client_software_version", text),
            ("client_source_address", text),
            ("principal", text),
            ("metric_name", text),
            ("metric_type", text),
            ("temporality", text),
            ("is_monotonic", pa.bool_()),
            ("unit", text),
            ("value", pa.float64()),
            ("count", pa.uint64()),
            ("sum", pa.float64()),
            ("min", pa.float64()),
            ("max", pa.float64()),
            ("bucket_counts", counts),
            ("explicit_bounds", doubles),
            ("exp_scale", pa.int32()),
            ("exp_zero_count", pa.uint64()),
            ("exp_zero_threshold", pa.float64()),
            ("exp_positive_offset", pa.int32()),
            ("exp_positive_bucket_counts", counts),
            ("exp_negative_offset", pa.int32()),
            ("exp_negative_bucket_counts", counts),
            ("quantiles", doubles),
            ("quantile_values", doubles),
            ("attributes", string_map),
            ("resource_attributes", string_map),
            ("scope_name", text),
            ("scope_version", text),
            ("terminating", pa.bool_()),
            ("push_offset", pa.int64()),
        ]
    )


def parquet_landing_position(data_dir: Path, log_id: str) -> int:
    """One past the last offset of ``log_id`` a Parquet landing under ``data_dir`` published.

    The Iceberg landing replacing it starts there: the host's committed
    position may lag behind the newest publication (SIGKILL between the two),
    and those offsets are in the Parquet files already. 0 without manifests.
    """
    directory = data_dir.joinpath(*MANIFEST_DIR)
    if not directory.is_dir():
        return 0
    end = -1
    for path in sorted(directory.glob("*.json")):
        body = json.loads(path.read_bytes())
        if body.get("version") not in _MANIFEST_VERSIONS:
            raise ValueError(f"{path}: unknown manifest version {body.get('version')!r}")
        if body.get("log_id") == log_id:
            end = max(end, int(body["last_offset"]))
    return end + 1


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
            landed = pq.read_table(path, schema=parquet_metrics_schema())
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
