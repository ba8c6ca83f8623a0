"""One flattening lane's rows: logged pushes in, Parquet data files of the lake out.

A ``LakeRows`` flattens batches (``exporters.landing.flatten``), turns them
into lake rows (``schema``) and streams them into one open data file per
table and receive hour (and, in a ``metrics`` table partitioned by kind, per
``metric_type``, without the columns that kind never fills: ``ABSENT_BY_KIND``),
in the table's ``data/`` directory through pyiceberg's FileIO (local disk or
S3); ``write`` closes the files and reports them, and the exporter commits
them. It runs in a worker process (``worker.py``) or, with ``workers = 0``, in
a thread of the server; either way one lane handles
its requests in order.
"""

from __future__ import annotations

import contextlib
import cProfile
import operator
import os
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io

from exporters.api import LoggedPush
from exporters.iceberg.schema import (
    METRICS_STATISTICS,
    METRICS_TABLE,
    PUSHES_TABLE,
    to_lake_pushes,
    to_lake_rows,
)
from exporters.landing.flatten import flatten_to_table
from exporters.landing.schema import hours_of, pushes_table, split_by_hour
from exporters.otlp_rows import (
    EXPONENTIAL_COLUMNS,
    HISTOGRAM_COLUMNS,
    SUMMARY_COLUMNS,
    FlattenStats,
    count_data_points,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyiceberg.io import FileIO


__all__ = [
    "ABSENT_BY_KIND",
    "NEVER_NULL",
    "BatchReply",
    "LakeRows",
    "LaneConfig",
    "OpenFile",
    "WrittenFile",
    "absent_columns",
    "file_layout",
    "landing_writer",
    "write_data_file",
]

#: Rows an open data file buffers before writing them as a row group.
ROW_GROUP_ROWS: Final = 131_072
#: Rows Parquet's writer encodes at a time: its default, 1,024, cost some 100
#: instructions a data point more in per-batch overhead. A page is checked
#: against its size limit (1 MiB) after each batch; the landing's columns are
#: dictionary indices and numbers, 64 Ki of which stay near that limit.
WRITE_BATCH_ROWS: Final = 65_536
#: Pushes (or payload bytes) gathered before they are flattened as one Arrow batch
#: (the exporter gathers before a hand-over, a lane before flattening). Flattening
#: has a fixed cost of about 5 ms per call (ptars' decoder setup and some 100 Arrow
#: kernels), so the small batches a busy log hands over (30-40 pushes at 3,500
#: requests/s) cost twice the per-point work; gathered, the fixed part is small.
#: Twice as many (1,024 pushes, 8 MiB) cut a librdkafka data point's 10,600
#: instructions by 460 but raised the worker's peak RSS under ingest_bench from
#: 267-288 to 320-338 MiB: not worth it.
COALESCE_PUSHES: Final = 512
COALESCE_BYTES: Final = 4 * 1024 * 1024
#: A directory in this environment variable turns on a CPU profile of the lane
#: (``benchmarks/ingest_bench.py --profile`` sets it for the server it starts).
PROFILE_ENV: Final = "KIP714_LANDING_PROFILE"
#: Columns (Parquet column paths) written with an encoding other than a dictionary.
#: Measured per column (a lane's files, instructions per data point to encode, and
#: bytes after zstd): a dictionary hashes every value, and for these zstd finds
#: the repeats as well or better; the measured values rarely repeat at all.
ENCODINGS: Final = {
    **dict.fromkeys(("value", "sum", "min", "max"), "BYTE_STREAM_SPLIT"),
    # Rising offsets: 102 against 142 instructions, a fifth of the bytes.
    "push_offset": "DELTA_BINARY_PACKED",
    # Small counts: an SDK point 180 instructions less, half the bytes of its file.
    "bucket_counts.list.element": "DELTA_BINARY_PACKED",
    "exp_positive_bucket_counts.list.element": "DELTA_BINARY_PACKED",
    "exp_negative_bucket_counts.list.element": "DELTA_BINARY_PACKED",
    # A handful of node ids, plain: 136 against 259 instructions, the same bytes.
    "node_id": "PLAIN",
    # Times that repeat within a push: 96-113 against 110-127 instructions, the same bytes.
    "time": "DELTA_BINARY_PACKED",
    "received_time": "DELTA_BINARY_PACKED",
    # Sizes constant within a push, plain: 59 against 110 instructions, the same bytes.
    "push_bytes": "PLAIN",
    "push_decoded_bytes": "PLAIN",
}
#: Columns written without a dictionary and without an ``ENCODINGS`` entry.
_UNDICTIONARIED: Final = frozenset({"payload"})
#: Per ``metric_type``, the ``metrics`` columns its rows never fill (``otlp_rows``), and
#: ``log_partition``, filled only from the pushes topic. A data file of one kind is
#: written without those of them that are all null: Parquet encodes a null per row
#: and column (its definition level), some 60 instructions a data point for each of
#: the 16-20 such columns, while Iceberg reads a column a file lacks as null (the
#: table's name mapping finds the others), as it does after a column is added.
ABSENT_BY_KIND: Final[dict[str, tuple[str, ...]]] = {
    "gauge": (
        "is_monotonic",
        *HISTOGRAM_COLUMNS,
        *EXPONENTIAL_COLUMNS,
        *SUMMARY_COLUMNS,
        "log_partition",
    ),
    "sum": (*HISTOGRAM_COLUMNS, *EXPONENTIAL_COLUMNS, *SUMMARY_COLUMNS, "log_partition"),
    "histogram": ("value", "is_monotonic", *EXPONENTIAL_COLUMNS, *SUMMARY_COLUMNS, "log_partition"),
    "exponential_histogram": (
        "value",
        "is_monotonic",
        "bucket_counts",
        "explicit_bounds",
        *SUMMARY_COLUMNS,
        "log_partition",
    ),
    "summary": (
        "value",
        "is_monotonic",
        "min",
        "max",
        "bucket_counts",
        "explicit_bounds",
        *EXPONENTIAL_COLUMNS,
        "log_partition",
    ),
}
_payload: Final = operator.attrgetter("payload")
_offset: Final = operator.attrgetter("offset")
#: A push's fields but its offset, in order (a copy keyed by index: ``LoggedPush(i, *...)``).
_past_offset: Final = operator.attrgetter(*(f.name for f in fields(LoggedPush)[1:]))


@dataclass(frozen=True, slots=True)
class LaneConfig:
    """What a lane needs: where the tables live and how to reach their storage."""

    lane_id: int
    node_id: str
    locations: Mapping[str, str]  # table name -> table location (file://… or s3://…)
    io_properties: Mapping[str, str]
    token: str  # unique per exporter start, so data file names never collide
    by_kind: bool = False  # the metrics table's spec partitions by metric_type (lake.split_by_kind)
    #: A push holding more data points is skipped whole (``skip_oversized``).
    max_data_points_per_push: int = 1_000_000
    #: Fed from the pushes topic: rows carry their push's partition (``log_partition``).
    partitioned: bool = False


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


@dataclass(slots=True)
class OpenFile:
    """One data file being written: its table, hour and location, and rows not yet written."""

    table: str
    hour: int
    location: str
    writer: pq.ParquetWriter
    rows: int = 0
    pending: list[pa.Table] = field(default_factory=list)
    pending_rows: int = 0


def write_pending(open_file: OpenFile) -> None:
    """Write the rows ``open_file`` buffers as one row group."""
    if not open_file.pending:
        return
    # One dictionary per column and row group: Parquet's writer takes an Arrow
    # dictionary as its own only while it stays the same within a column chunk.
    rows = pa.concat_tables(open_file.pending).unify_dictionaries()
    open_file.writer.write_table(rows, row_group_size=max(rows.num_rows, 1))
    open_file.rows += rows.num_rows
    open_file.pending.clear()
    open_file.pending_rows = 0


def landing_writer(
    where: Any,
    schema: pa.Schema,
    compression_level: int | None = None,
    statistics: Sequence[str] | None = None,
) -> pq.ParquetWriter:
    """A Parquet writer with the landing's encodings, for a path or a writable stream.

    zstd; byte-stream split for the measured values (``value``, ``sum``,
    ``min``, ``max``), delta encoding for the times, push offsets and bucket
    counts, plain ``node_id`` and push sizes (``ENCODINGS``), and
    dictionaries for every other column except a raw ``payload``: measured
    values rarely repeat while everything else does, and where zstd finds
    the repeats anyway, delta and plain cost less than hashing every value.

    A schema with Arrow dictionaries (``lake_encoded_schema``, the lanes'
    rows) is written without the Arrow schema in the file, so every reader
    sees the plain strings they stand for. Statistics are written for the
    ``statistics`` columns only (all when ``None``): the commit reads a
    file's partition values (``metric_type``) and Iceberg's column bounds
    from them, for the columns the table's metrics keep
    (``lake.METRICS_PROPERTIES``).
    """
    encodings = {
        column: encoding
        for column, encoding in ENCODINGS.items()
        if column.split(".", 1)[0] in schema.names
    }
    encoded = any(pa.types.is_dictionary(f.type) for f in schema)
    return pq.ParquetWriter(
        where,
        schema,
        compression="zstd",
        compression_level=compression_level,
        column_encoding=encodings or None,
        use_dictionary=[c for c in schema.names if c not in encodings and c not in _UNDICTIONARIED],
        write_statistics=True
        if statistics is None
        else [c for c in statistics if c in schema.names],
        store_schema=not encoded,
        write_batch_size=WRITE_BATCH_ROWS,
    )


def write_data_file(
    io: FileIO, table_location: str, rows: pa.Table, hour: int, name: str, kind: str | None = None
) -> str:
    """Write ``rows`` (one receive hour, one ``kind`` if given) as a Parquet data file.

    Written with the landing's encodings (``landing_writer``) under
    ``table_location``. The file carries no field ids; the table's name
    mapping resolves its columns.
    """
    location = data_file_location(table_location, hour, name, kind)
    with io.new_output(location).create(overwrite=True) as stream:
        writer = landing_writer(stream, rows.schema)
        writer.write_table(rows)
        writer.close()
    return location


def data_file_location(table_location: str, hour: int, name: str, kind: str | None = None) -> str:
    """Where a data file goes: ``<table>/data/received_time_hour=…/[metric_type=…/]``.

    The path only follows Iceberg's convention for people browsing the
    warehouse; readers take the partition from the table's metadata.
    """
    stamp = time.strftime("%Y-%m-%d-%H", time.gmtime(hour * 3600))
    directory = f"{table_location}/data/received_time_hour={stamp}"
    if kind is not None:
        directory += f"/metric_type={kind}"
    return f"{directory}/{name}.parquet"


def pieces_by_kind(rows: pa.Table) -> list[tuple[str, pa.Table]]:
    """``rows`` cut into one piece per ``metric_type``, in name order.

    Each kind is filtered out of the batch (a push usually carries two or
    three kinds), each piece keeping the rows' order; a batch of one kind is
    returned whole, uncopied. Rows grouped by kind
    (``flatten_to_table(..., by_kind=True)``) give their largest kind as a
    slice, uncopied: a slice holds on to the whole batch while its file
    buffers it, so only the kind whose file fills first is sliced; the
    others are copied out of their slices buffer by buffer (``_compact``),
    a tenth of what filtering them cost.
    """
    kinds = rows.column("metric_type").combine_chunks()
    encoded = pa.types.is_dictionary(kinds.type)
    runs = pc.run_end_encode(kinds.indices if encoded else kinds)
    values = runs.values.to_pylist()
    names = kinds.dictionary.to_pylist() if encoded else values
    present = sorted({str(names[v] if encoded else v) for v in values})
    if len(present) == 1:
        return [(present[0], rows)]
    if len(set(values)) != len(values):  # some kind in more than one run
        return [(kind, rows.filter(pc.equal(kinds, kind))) for kind in present]
    ends = runs.run_ends.to_pylist()
    spans = {
        str(names[value] if encoded else value): (start, end)
        for value, start, end in zip(values, [0, *ends[:-1]], ends, strict=True)
    }
    largest = max(spans, key=lambda kind: spans[kind][1] - spans[kind][0])
    pieces = []
    for kind in present:
        start, end = spans[kind]
        piece = rows.slice(start, end - start)
        pieces.append((kind, piece if kind == largest else _compact(piece)))
    return pieces


def _compact(rows: pa.Table) -> pa.Table:
    """A copy of ``rows`` (a slice) holding only its own rows' buffers, not the whole batch's."""
    return pa.Table.from_arrays(
        [pa.concat_arrays(column.chunks) for column in rows.columns], schema=rows.schema
    )


#: ``metrics`` columns no row leaves null (``otlp_rows``, ``schema.to_lake_rows``).
#: A data file of one kind declares those of them without a null required:
#: Parquet then writes no definition level per row for them, about 30
#: instructions a data point each. The table's columns stay optional (a
#: required column in a file is read as the optional one it stands for).
NEVER_NULL: Final = (
    "time",
    "received_time",
    "client_instance_id",
    "metric_name",
    "metric_type",
    "temporality",
    "attributes",
    "resource_attributes",
    "terminating",
    "push_offset",
    "ingest_node",
    "push_decoded_bytes",
)


def file_layout(kind: str, rows: pa.Table) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(``absent_columns``, the ``NEVER_NULL`` columns without a null) of ``rows`` of ``kind``."""
    present = rows.schema.get_field_index
    required = tuple(
        name for name in NEVER_NULL if present(name) >= 0 and rows.column(name).null_count == 0
    )
    return absent_columns(kind, rows), required


def laid_out(rows: pa.Table, absent: tuple[str, ...], required: tuple[str, ...]) -> pa.Table:
    """``rows`` without the ``absent`` columns, the ``required`` ones declared non-nullable."""
    if absent:
        rows = rows.drop_columns(list(absent))
    if not required:
        return rows
    schema = rows.schema
    for name in required:
        where = schema.get_field_index(name)
        schema = schema.set(where, schema.field(where).with_nullable(False))
    return pa.Table.from_arrays(rows.columns, schema=schema)


def absent_columns(kind: str, rows: pa.Table) -> tuple[str, ...]:
    """The columns of ``ABSENT_BY_KIND[kind]`` that are all null in ``rows`` (of that kind).

    Checked, not assumed: a column that holds a value stays, and the rows
    then go to a file of their own (``LakeRows`` keys its files by these).
    """
    count = rows.num_rows
    return tuple(
        name
        for name in ABSENT_BY_KIND.get(kind, ())
        if rows.schema.get_field_index(name) >= 0 and rows.column(name).null_count == count
    )


def skip_oversized(
    pushes: list[LoggedPush], max_points: int, stats: FlattenStats
) -> list[LoggedPush]:
    """``pushes`` without those holding more than ``max_points`` data points, counted in ``stats``.

    Skipped whole, before anything of them is decoded, as an undecodable
    payload is: a 1.2 KB compressed push can decode to 7 million data points,
    minutes of landing work and as many rows. The count is at the wire level
    and only for payloads large enough to exceed the bound
    (``count_data_points``).
    """
    # count_data_points walks only payloads of 2 * (max_points + 1) bytes or more.
    if max(map(len, map(_payload, pushes)), default=0) < 2 * (max_points + 1):
        return pushes
    kept = [push for push in pushes if count_data_points(push.payload, max_points) <= max_points]
    stats.oversized_pushes += len(pushes) - len(kept)
    return kept


class LaneProfile:
    """cProfile of a lane's work on the process's CPU clock, written out after every ``write``.

    Why in the lane: its work runs in a worker process that the server
    spawns, where no outside profiler needs to attach. The stats accumulate
    over the process's life in ``<dir>/landing-lane-<pid>.pstats``.
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, f"landing-lane-{os.getpid()}.pstats")
        self.profiler = cProfile.Profile(time.process_time_ns, 1e-9)

    @classmethod
    def from_environment(cls) -> LaneProfile | None:
        directory = os.environ.get(PROFILE_ENV)
        return cls(directory) if directory else None

    def dump(self) -> None:
        self.profiler.dump_stats(self.path)


_FileKey = tuple[str, int, str, tuple[tuple[str, ...], tuple[str, ...]]]


@dataclass(slots=True)
class LakeRows:
    """One lane's rows of the current generation, streamed into open data files.

    Rows are appended to one open Parquet file per table, receive hour and
    (``LaneConfig.by_kind``) kind, and written out as a row group every
    ``row_group_rows`` rows, so memory stays bounded by a row group per open
    file however long the generation is.
    """

    config: LaneConfig
    row_group_rows: int = ROW_GROUP_ROWS
    #: Open data files by table, hour, kind, and their ``file_layout``.
    files: dict[_FileKey, OpenFile] = field(default_factory=dict)
    streams: dict[str, Any] = field(default_factory=dict)  # location -> its output stream
    rows: int = 0
    written: int = 0
    coalesce_pushes: int = COALESCE_PUSHES
    #: Pushes handed over but not flattened yet (metrics rows, raw rows) and their payload bytes.
    pending: list[LoggedPush] = field(default_factory=list)
    pending_raw: list[LoggedPush] = field(default_factory=list)
    pending_bytes: int = 0
    _io: FileIO | None = None
    profile: LaneProfile | None = field(default_factory=LaneProfile.from_environment)

    @property
    def io(self) -> FileIO:
        if self._io is None:
            first = next(iter(self.config.locations.values()))
            self._io = load_file_io(dict(self.config.io_properties), first)
        return self._io

    def batch(
        self, pushes: Sequence[LoggedPush], metrics_from: int, pushes_from: int | None
    ) -> BatchReply:
        """Take ``pushes`` (those at or past each table's resume offset) for the generation.

        They are flattened once ``coalesce_pushes`` pushes or ``COALESCE_BYTES``
        of payload are gathered, or by ``write``; the reply counts what was
        flattened now.
        """
        if self.profile is None:
            return self._batch(pushes, metrics_from, pushes_from)
        self.profile.profiler.enable()
        try:
            return self._batch(pushes, metrics_from, pushes_from)
        finally:
            self.profile.profiler.disable()

    def _batch(
        self, pushes: Sequence[LoggedPush], metrics_from: int, pushes_from: int | None
    ) -> BatchReply:
        fresh: Sequence[LoggedPush] = pushes  # usually all are past the resume offset
        if min(map(_offset, pushes), default=metrics_from) < metrics_from:
            fresh = [p for p in pushes if p.offset >= metrics_from]
        self.pending.extend(fresh)
        self.pending_bytes += sum(map(len, map(_payload, fresh)))
        if pushes_from is not None:
            self.pending_raw.extend(p for p in pushes if p.offset >= pushes_from)
        gathered = len(self.pending) + len(self.pending_raw)
        if gathered >= self.coalesce_pushes or self.pending_bytes >= COALESCE_BYTES:
            return self.flush()
        return BatchReply(FlattenStats(), 0, 0, 0, 0, self.rows + gathered)

    def flush(self) -> BatchReply:
        """Flatten the gathered pushes and append their rows to the open data files."""
        stats = FlattenStats()
        reply = BatchReply(stats, 0, 0, 0, 0, 0)
        fresh, self.pending, self.pending_bytes = self.pending, [], 0
        raw, self.pending_raw = self.pending_raw, []
        fresh = skip_oversized(fresh, self.config.max_data_points_per_push, stats)
        if fresh:
            pushes, keyed = fresh, self.config.partitioned
            if keyed:  # offsets repeat across the topic's partitions: flatten by index
                fresh = [LoggedPush(i, *_past_offset(p)) for i, p in enumerate(pushes)]
            flat, flat_stats, unlandable = flatten_to_table(fresh, by_kind=self.config.by_kind)
            if keyed:
                named = [pushes[i].offset for i in flat_stats.undecodable_offsets]
                flat_stats.undecodable_offsets = named
            stats.merge(flat_stats)
            table, reply.refused_counts = to_lake_rows(
                flat,
                self.config.node_id,
                encoded=True,
                pushes=pushes,
                keyed=keyed,
                partitioned=keyed,
            )
            reply.unlandable = len(unlandable)
            reply.rows = table.num_rows
            self._append(METRICS_TABLE, table)
        if raw:
            table = to_lake_pushes(pushes_table(raw), self.config.node_id)
            reply.raw_rows = table.num_rows
            self._append(PUSHES_TABLE, table)
        reply.buffered = self.rows
        return reply

    def _append(self, name: str, table: pa.Table) -> None:
        if not table.num_rows:
            return
        self.rows += table.num_rows
        by_kind = self.config.by_kind and name == METRICS_TABLE
        for hour, part in split_by_hour(table, hours_of(table.column("received_time"))):
            pieces = pieces_by_kind(part) if by_kind else [("", part)]
            for kind, whole in pieces:
                layout = file_layout(kind, whole) if kind else ((), ())
                piece = laid_out(whole, *layout)
                key = (name, hour, kind, layout)
                open_file = self.files.get(key)
                if open_file is None:
                    open_file = self.files[key] = self._open(name, hour, kind, piece.schema)
                open_file.pending.append(piece)
                open_file.pending_rows += piece.num_rows
                if open_file.pending_rows >= self.row_group_rows:
                    write_pending(open_file)

    def _open(self, name: str, hour: int, kind: str, schema: pa.Schema) -> OpenFile:
        self.written += 1
        location = data_file_location(
            self.config.locations[name],
            hour,
            f"{self.config.node_id}-{self.config.token}-l{self.config.lane_id}-{self.written}",
            kind or None,
        )
        stream = self.streams[location] = self.io.new_output(location).create(overwrite=True)
        statistics = METRICS_STATISTICS if name == METRICS_TABLE else None
        return OpenFile(name, hour, location, landing_writer(stream, schema, statistics=statistics))

    def write(self, first: int, last: int) -> tuple[list[WrittenFile], BatchReply]:
        """Flatten what is gathered, close every open data file of ``first..last``; report them.

        Returns the files and what the final flattening did.
        """
        del first, last  # the commit's snapshot properties carry the offsets
        if self.profile is None:
            return self._write()
        self.profile.profiler.enable()
        try:
            return self._write()
        finally:
            self.profile.profiler.disable()
            self.profile.dump()

    def _write(self) -> tuple[list[WrittenFile], BatchReply]:
        flushed = self.flush()
        files: list[WrittenFile] = []
        for key in sorted(self.files):
            open_file = self.files[key]
            write_pending(open_file)
            open_file.writer.close()
            self.streams.pop(open_file.location).close()
            files.append(WrittenFile(open_file.table, open_file.location, open_file.rows))
        self.files.clear()
        self.rows = 0
        return files, flushed

    def discard(self) -> None:
        """Drop the generation (after a failure): close what is open; orphans are cleaned later."""
        for open_file in self.files.values():
            with contextlib.suppress(Exception):
                open_file.writer.close()
        for stream in self.streams.values():
            with contextlib.suppress(Exception):
                stream.close()
        self.files.clear()
        self.streams.clear()
        self.pending, self.pending_raw, self.pending_bytes = [], [], 0
        self.rows = 0
