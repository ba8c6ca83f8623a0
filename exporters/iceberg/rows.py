"""One flattening lane's rows: logged pushes in, Parquet data files of the lake out.

A ``LakeRows`` flattens batches (``exporters.parquet.flatten``, the Parquet
landing's vectorised flattener), turns them into lake rows (``schema``) and
buffers them until ``write``, which writes one data file per table and
receive hour into the table's ``data/`` directory through pyiceberg's
FileIO (local disk or S3) and reports the files; the exporter then commits
them. It runs in a worker process (``worker.py``) or, with ``workers = 0``,
in a thread of the server; either way one lane handles its requests in
order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io

from exporters.iceberg.schema import (
    METRICS_TABLE,
    PUSHES_TABLE,
    concat,
    lake_metrics_schema,
    lake_pushes_schema,
    to_lake_pushes,
    to_lake_rows,
)
from exporters.otlp_rows import FlattenStats
from exporters.parquet.flatten import flatten_to_table
from exporters.parquet.schema import hours_of, pushes_table, split_by_hour

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyiceberg.io import FileIO

    from exporters.api import LoggedPush

__all__ = ["BatchReply", "LakeRows", "LaneConfig", "WrittenFile", "write_data_file"]

_FLOAT_COLUMNS: Final = ("value", "sum", "min", "max")


@dataclass(frozen=True, slots=True)
class LaneConfig:
    """What a lane needs: where the tables live and how to reach their storage."""

    lane_id: int
    node_id: str
    locations: Mapping[str, str]  # table name -> table location (file://… or s3://…)
    io_properties: Mapping[str, str]
    token: str  # unique per exporter start, so data file names never collide


@dataclass(slots=True)
class BatchReply:
    """What one batch did, for the exporter's counters and its write decisions."""

    stats: FlattenStats
    rows: int
    raw_rows: int
    refused_counts: int
    unlandable: int
    buffered: int  # rows this lane buffers now


@dataclass(frozen=True, slots=True)
class WrittenFile:
    table: str
    location: str
    rows: int


def write_data_file(io: FileIO, table_location: str, rows: pa.Table, hour: int, name: str) -> str:
    """Write ``rows`` (one receive hour) as a Parquet data file under ``table_location``.

    Written with the encodings the Parquet landing measured best: zstd,
    byte-stream split for the measured values, dictionaries elsewhere. The
    file carries no field ids; the table's name mapping resolves its columns.
    """
    stamp = time.strftime("%Y-%m-%d-%H", time.gmtime(hour * 3600))
    location = f"{table_location}/data/received_time_hour={stamp}/{name}.parquet"
    split = [c for c in _FLOAT_COLUMNS if c in rows.column_names]
    with io.new_output(location).create(overwrite=True) as stream:
        pq.write_table(
            rows,
            stream,
            compression="zstd",
            use_byte_stream_split=split or False,
            use_dictionary=[c for c in rows.column_names if c not in split],
            row_group_size=1 << 20,
        )
    return location


@dataclass(slots=True)
class LakeRows:
    """One lane's buffered rows of the current generation."""

    config: LaneConfig
    buffered: dict[str, list[pa.Table]] = field(default_factory=dict)
    rows: int = 0
    written: int = 0
    _io: FileIO | None = None

    @property
    def io(self) -> FileIO:
        if self._io is None:
            first = next(iter(self.config.locations.values()))
            self._io = load_file_io(dict(self.config.io_properties), first)
        return self._io

    def batch(
        self, pushes: Sequence[LoggedPush], metrics_from: int, pushes_from: int | None
    ) -> BatchReply:
        """Flatten ``pushes`` (those at or past each table's resume offset) and buffer them."""
        stats = FlattenStats()
        reply = BatchReply(stats, 0, 0, 0, 0, 0)
        fresh = [p for p in pushes if p.offset >= metrics_from]
        if fresh:
            flat, flat_stats, unlandable = flatten_to_table(fresh)
            stats.merge(flat_stats)
            table, reply.refused_counts = to_lake_rows(flat, self.config.node_id)
            reply.unlandable = len(unlandable)
            reply.rows = table.num_rows
            self._buffer(METRICS_TABLE, table)
        if pushes_from is not None:
            raw = [p for p in pushes if p.offset >= pushes_from]
            if raw:
                table = to_lake_pushes(pushes_table(raw), self.config.node_id)
                reply.raw_rows = table.num_rows
                self._buffer(PUSHES_TABLE, table)
        reply.buffered = self.rows
        return reply

    def _buffer(self, name: str, table: pa.Table) -> None:
        if table.num_rows:
            self.buffered.setdefault(name, []).append(table)
            self.rows += table.num_rows

    def write(self, first: int, last: int) -> list[WrittenFile]:
        """Write every buffered row as data files (one per table and receive hour)."""
        files: list[WrittenFile] = []
        for name, tables in sorted(self.buffered.items()):
            schema = lake_metrics_schema() if name == METRICS_TABLE else lake_pushes_schema()
            rows = concat(tables, schema)
            for hour, part in split_by_hour(rows, hours_of(rows.column("received_time"))):
                self.written += 1
                file_name = (
                    f"{self.config.node_id}-{first:020d}-{last:020d}-{self.config.token}"
                    f"-l{self.config.lane_id}-{self.written}"
                )
                location = write_data_file(
                    self.io, self.config.locations[name], part, hour, file_name
                )
                files.append(WrittenFile(name, location, part.num_rows))
        self.buffered.clear()
        self.rows = 0
        return files

    def discard(self) -> None:
        self.buffered.clear()
        self.rows = 0
