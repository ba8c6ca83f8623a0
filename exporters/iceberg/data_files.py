"""Appending kip714's own data files: pyiceberg's ``add_files`` without its repeated work.

pyiceberg's ``add_files`` describes each file from its Parquet footer (its
rows, column sizes, bounds and partition) and, first, checks the file's
Arrow schema against the table's. On the landing's 40-column files that
check is about 9 of the 12 ms a file costs (0.9 ms to read the footer, 2 ms
for the statistics), paid by one process for every file of a commit: the
fleet's committer adds N nodes' files at once, and its commit time grew with
N (docs/scaling.md). Every file a commit names was written by a kip714 lane
with the table's schema, so here the check runs once per distinct file
schema and table schema; the rest is pyiceberg's own code, called as
``add_files`` calls it.

The other repeat grows with the table's history: pyiceberg 0.12's
``Transaction.table_metadata`` deep-copies the whole table metadata, every
retained snapshot with its summary, on each of the 16 times an append reads
it. At 600 snapshots that was 85% of a commit's 4.4 s (profiled here); a
commit's CPU grew about 2 ms per retained snapshot, so a committer at one
commit per 5 s with an hour of snapshots kept (720) would spend most of its
interval copying. ``_Transaction`` computes it once per set of updates
(the metadata is a frozen pydantic model: nothing may change a copy).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    _check_pyarrow_schema_compatible,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import TableProperties, Transaction
from pyiceberg.table.update import update_table_metadata
from pyiceberg.utils.concurrent import ExecutorFactory
from pyiceberg.utils.properties import property_as_bool

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update import TableUpdate

__all__ = ["append_files", "describe_files", "transaction"]

#: Distinct (table schema, file schema) pairs remembered as checked; then forgotten at once.
_CHECKED_MAX: Final = 64
_checked: set[tuple[str, int, int, pa.Schema]] = set()
_checked_lock = threading.Lock()


def describe_files(io: FileIO, metadata: TableMetadata, locations: Sequence[str]) -> list[DataFile]:
    """One ``DataFile`` per location, from its footer, as ``add_files`` makes them.

    Footers are read on pyiceberg's shared executor, as ``add_files`` reads
    them (an object store's latency overlaps).

    Raises:
        ValueError: A file's schema does not fit the table's.
    """
    schema = metadata.schema()
    plan = compute_statistics_plan(schema, metadata.properties)
    mapping = parquet_path_to_id_mapping(schema)

    def describe(location: str) -> DataFile:
        input_file = io.new_input(location)
        with input_file.open() as stream:
            footer = pq.read_metadata(stream)
        _check_once(metadata, footer.schema.to_arrow_schema())
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer, stats_columns=plan, parquet_column_mapping=mapping
        )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=location,
            file_format=FileFormat.PARQUET,
            partition=statistics.partition(metadata.spec(), schema),
            file_size_in_bytes=len(input_file),
            sort_order_id=None,
            spec_id=metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )

    return list(ExecutorFactory.get_or_create().map(describe, locations))


def _check_once(metadata: TableMetadata, file_schema: pa.Schema) -> None:
    table = metadata.table_uuid.hex
    key = (table, metadata.current_schema_id, metadata.format_version, file_schema)
    if key in _checked:
        return
    _check_pyarrow_schema_compatible(
        metadata.schema(), file_schema, format_version=metadata.format_version
    )
    with _checked_lock:
        if len(_checked) >= _CHECKED_MAX:
            _checked.clear()
        _checked.add(key)


def append_files(table: Table, locations: Sequence[str], properties: dict[str, str]) -> None:
    """Append ``locations`` in one snapshot with ``properties`` (``add_files`` without its
    duplicate check: a commit's files are new, named once).

    Raises:
        CommitFailedException: Another commit won the race (the caller retries).
        ValueError: A file's schema does not fit the table's.
    """
    with _Transaction(table) as transaction:
        metadata = transaction.table_metadata
        if metadata.name_mapping() is None:  # as add_files: readers map columns by name
            mapping = metadata.schema().name_mapping.model_dump_json()
            transaction.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
        data_files = describe_files(table.io, metadata, locations)
        update = transaction.update_snapshot(snapshot_properties=properties)
        merge = property_as_bool(
            metadata.properties,
            TableProperties.MANIFEST_MERGE_ENABLED,
            TableProperties.MANIFEST_MERGE_ENABLED_DEFAULT,
        )
        with update.merge_append() if merge else update.fast_append() as append:
            for data_file in data_files:
                append.append_data_file(data_file)


def transaction(table: Table) -> Transaction:
    """``table.transaction()`` without the repeated copies (any kip714 commit: deletes,
    compaction's overwrite)."""
    return _Transaction(table)


class _Transaction(Transaction):
    """pyiceberg's transaction, its ``table_metadata`` made once per base and updates."""

    _memo: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        memo = self._memo
        if memo is not None and memo[0] is base and memo[1] is updates:
            return memo[2]
        metadata = update_table_metadata(base, updates)
        self._memo = (base, updates, metadata)
        return metadata
