"""Compaction: rewrite a closed hour's many small landing files into few large ones, atomically.

Why pyarrow, not Spark: the landing stores counts as unsigned 64-bit
integers, which Spark can read (as ``decimal(20,0)``) but never write, so a
Spark rewrite would change the files' physical schema under every other
reader. pyarrow copies the writer's schema exactly and streams record batches,
so memory stays bounded by a batch, not by the hour. Paths: local, or any URI
``pyarrow.fs.FileSystem.from_uri`` understands (``s3://``, ``gs://``,
``hdfs://``).

Protocol for one hour ``H = metrics/date=D/hour=HH`` (one compactor at a time):

1. Only a closed hour: its end plus ``grace`` is in the past.
2. ``S`` = the visible data files of ``H`` now (names not starting with
   ``_``/``.``). Files the server adds later (late data) are never touched.
3. Stream ``S`` into ``metrics/_compaction/<id>/`` (hidden from every reader),
   then check that the staged row count equals ``S``'s.
4. Commit: write ``H/_compaction-<id>.json`` (inputs, outputs) through a
   temporary name and a rename.
5. Move the staged files into ``H`` as ``compacted-<id>-<k>.parquet``.
6. Delete the files of ``S``, then the manifest and the staging directory.

A crash before 4 leaves only a staging directory (rolled back by
``recover``); after 4, ``recover`` rolls forward from the manifest.

What a reader racing the swap can observe:

* ``spark_jobs`` readers (``io.read_landing``, so every rollup) treat an hour
  holding a manifest as busy and wait, and trust only two identical listings
  in a row: they see all of ``S`` or all of the outputs, never both or a
  part. A reader that listed ``S`` before step 4 and opens a file after
  step 6 fails with a missing file; the job then starts over (twice at most).
* Other readers (DuckDB, Spark on the directory) see no manifest rule: during
  steps 5–6, which take milliseconds on a local disk, a listing can include
  outputs and inputs together (double) or an open can fail. Point them at
  hours that are not being compacted, or read through ``spark_jobs.io``.
* The incremental job skips ``compacted-*`` names; see ``incremental``.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from spark_jobs.io import COMPACTED_PREFIX, COMPACTION_MANIFEST_PREFIX

__all__ = [
    "DEFAULT_GRACE",
    "CompactionResult",
    "compact_closed_hours",
    "compact_hour",
    "main",
    "recover",
]

DEFAULT_GRACE = timedelta(minutes=10)
"""How long after its end an hour still takes late files before it counts as closed."""

_MANIFEST = COMPACTION_MANIFEST_PREFIX
_STAGING = "_compaction"
_TARGET_ROWS = 8_000_000


@dataclass(frozen=True, slots=True)
class CompactionResult:
    hour: datetime
    files_before: int
    files_after: int
    rows: int


def _filesystem(data_dir: str) -> tuple[pafs.FileSystem, str]:
    if "://" in data_dir:
        fs, path = pafs.FileSystem.from_uri(data_dir)
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), str(data_dir).rstrip("/")


def _children(fs: pafs.FileSystem, path: str) -> list[Any]:
    return sorted(
        fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)), key=lambda i: i.path
    )


def _is_data(name: str) -> bool:
    return name.endswith(".parquet") and not name.startswith(("_", "."))


def _hour_dir(root: str, hour: datetime) -> str:
    return f"{root}/metrics/date={hour:%Y-%m-%d}/hour={hour:%H}"


def _write_manifest(fs: pafs.FileSystem, path: str, content: dict[str, Any]) -> None:
    temporary = f"{path}.tmp"
    with fs.open_output_stream(temporary) as out:
        out.write(json.dumps(content).encode())
    fs.move(temporary, path)


def _finish(fs: pafs.FileSystem, hour_dir: str, manifest: dict[str, Any], path: str) -> None:
    """Steps 5–6 of the protocol; idempotent, so recovery can repeat it."""
    staging = manifest["staging"]
    for k, staged in enumerate(manifest["staged"]):
        target = f"{hour_dir}/{manifest['outputs'][k]}"
        if fs.get_file_info(f"{staging}/{staged}").type == pafs.FileType.File:
            fs.move(f"{staging}/{staged}", target)
    for name in manifest["inputs"]:
        if fs.get_file_info(f"{hour_dir}/{name}").type == pafs.FileType.File:
            fs.delete_file(f"{hour_dir}/{name}")
    fs.delete_file(path)
    if fs.get_file_info(staging).type == pafs.FileType.Directory:
        fs.delete_dir(staging)


def compact_hour(
    data_dir: str,
    hour: datetime,
    *,
    now: datetime,
    grace: timedelta = DEFAULT_GRACE,
    target_rows: int = _TARGET_ROWS,
) -> CompactionResult | None:
    """Compact one closed hour; None when it holds at most one file.

    Raises:
        ValueError: the hour is not closed yet.
        RuntimeError: the staged copy lost or gained rows (nothing was swapped).
    """
    hour = hour.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if hour + timedelta(hours=1) + grace > now:
        raise ValueError(f"hour {hour:%Y-%m-%dT%H}Z is not closed (grace {grace})")
    fs, root = _filesystem(data_dir)
    hour_dir = _hour_dir(root, hour)
    listing = _children(fs, hour_dir)
    if any(i.base_name.startswith(_MANIFEST) for i in listing):
        recover(data_dir)
        listing = _children(fs, hour_dir)
    inputs = [
        i.base_name for i in listing if i.type == pafs.FileType.File and _is_data(i.base_name)
    ]
    if len(inputs) <= 1:
        return None
    paths = [f"{hour_dir}/{name}" for name in inputs]
    schema = pa.unify_schemas([pq.read_schema(p, filesystem=fs) for p in paths])
    source = ds.dataset(paths, schema=schema, format="parquet", filesystem=fs)
    expected = source.count_rows()
    compaction_id = uuid.uuid4().hex[:12]
    staging = f"{root}/metrics/{_STAGING}/{compaction_id}"
    fs.create_dir(staging)
    staged: list[str] = []
    writer: pq.ParquetWriter | None = None
    rows_in_file = 0
    for batch in source.to_batches():
        if writer is None or rows_in_file >= target_rows:
            if writer is not None:
                writer.close()
            staged.append(f"part-{len(staged)}.parquet")
            sink = fs.open_output_stream(f"{staging}/{staged[-1]}")
            writer = pq.ParquetWriter(sink, schema, compression="zstd")
            rows_in_file = 0
        writer.write_batch(batch)
        rows_in_file += batch.num_rows
    if writer is not None:
        writer.close()
    written = sum(pq.read_metadata(f"{staging}/{s}", filesystem=fs).num_rows for s in staged)
    if written != expected:
        fs.delete_dir(staging)
        raise RuntimeError(f"{hour_dir}: staged {written} rows for {expected}; nothing swapped")
    outputs = [f"{COMPACTED_PREFIX}{compaction_id}-{k}.parquet" for k in range(len(staged))]
    manifest = {"inputs": inputs, "staging": staging, "staged": staged, "outputs": outputs}
    manifest_path = f"{hour_dir}/{_MANIFEST}{compaction_id}.json"
    _write_manifest(fs, manifest_path, manifest)
    _finish(fs, hour_dir, manifest, manifest_path)
    return CompactionResult(hour, len(inputs), len(outputs), expected)


def recover(data_dir: str) -> int:
    """Finish committed compactions and discard uncommitted ones; returns how many it touched."""
    fs, root = _filesystem(data_dir)
    touched = 0
    committed: set[str] = set()
    for date_dir in _children(fs, f"{root}/metrics"):
        if not date_dir.base_name.startswith("date="):
            continue
        for hour_dir in _children(fs, date_dir.path):
            for item in _children(fs, hour_dir.path):
                if not item.base_name.startswith(_MANIFEST):
                    continue
                touched += 1
                if item.base_name.endswith(".tmp"):
                    fs.delete_file(item.path)
                    continue
                with fs.open_input_stream(item.path) as stream:
                    manifest = json.loads(stream.read())
                committed.add(manifest["staging"])
                _finish(fs, hour_dir.path, manifest, item.path)
    for staging in _children(fs, f"{root}/metrics/{_STAGING}"):
        if staging.path not in committed:
            fs.delete_dir(staging.path)
            touched += 1
    return touched


def compact_closed_hours(
    data_dir: str, *, now: datetime, grace: timedelta = DEFAULT_GRACE, since: datetime | None = None
) -> list[CompactionResult]:
    """Recover, then compact every closed hour (from ``since``) that holds several files."""
    recover(data_dir)
    fs, root = _filesystem(data_dir)
    results = []
    for date_dir in _children(fs, f"{root}/metrics"):
        if not date_dir.base_name.startswith("date="):
            continue
        for hour_dir in _children(fs, date_dir.path):
            try:
                hour = datetime.strptime(
                    f"{date_dir.base_name[5:]} {hour_dir.base_name[5:]}", "%Y-%m-%d %H"
                ).replace(tzinfo=UTC)
            except ValueError:
                continue
            if hour + timedelta(hours=1) + grace > now or (since is not None and hour < since):
                continue
            result = compact_hour(data_dir, hour, now=now, grace=grace)
            if result is not None:
                results.append(result)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Entry of ``python -m spark_jobs.compaction``; exit 2 when the data directory is missing."""
    parser = argparse.ArgumentParser(prog="kip714 compact")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--grace-minutes", type=float, default=DEFAULT_GRACE.total_seconds() / 60)
    parser.add_argument("--since", type=datetime.fromisoformat, help="first hour (ISO-8601, UTC)")
    parser.add_argument("--recover", action="store_true", help="only finish or undo crashed runs")
    args = parser.parse_args(argv)
    fs, root = _filesystem(args.data_dir)
    if fs.get_file_info(root).type != pafs.FileType.Directory:
        print(f"kip714 compact: error: data directory not found: {args.data_dir}", file=sys.stderr)
        return 2
    if args.recover:
        print(f"kip714 compact: {recover(args.data_dir)} interrupted compactions resolved")
        return 0
    since = args.since.replace(tzinfo=args.since.tzinfo or UTC) if args.since else None
    results = compact_closed_hours(
        args.data_dir,
        now=datetime.now(UTC),
        grace=timedelta(minutes=args.grace_minutes),
        since=since,
    )
    for r in results:
        print(
            f"kip714 compact: {r.hour:%Y-%m-%dT%H}Z {r.files_before} files → "
            f"{r.files_after} ({r.rows:,} rows)"
        )
    if not results:
        print("kip714 compact: nothing to compact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
