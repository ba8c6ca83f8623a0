"""``data_files.append_files``: what pyiceberg's ``add_files`` appends, its schema check once."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog

from exporters.iceberg import data_files
from tests.exporters.lake_support import land
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, push

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

#: What describes a data file to a reader: every field a manifest entry holds for it.
DESCRIBED = (
    "record_count",
    "file_size_in_bytes",
    "column_sizes",
    "value_counts",
    "null_value_counts",
    "nan_value_counts",
    "lower_bounds",
    "upper_bounds",
    "split_offsets",
    "spec_id",
)


def landed_table(root: Path) -> Table:
    pushes = [
        push(PRODUCER_PUSH.read_bytes(), offset=0),
        push(CONSUMER_PUSH.read_bytes(), offset=1),
    ]
    land(root, [pushes])
    catalog = load_catalog("kip714", type="sql", uri=f"sqlite:///{root}/lake/catalog.db")
    return catalog.load_table(("kip714", "metrics"))


def files_of(table: Table) -> dict[str, DataFile]:
    return {task.file.file_path: task.file for task in table.scan().plan_files()}


def copied(location: str, suffix: str) -> str:
    path = location.removeprefix("file://")
    target = path.replace(".parquet", f"-{suffix}.parquet")
    shutil.copy(path, target)
    return f"file://{target}" if location.startswith("file://") else target


def described(data_file: DataFile) -> dict[str, Any]:
    return {
        "partition": repr(data_file.partition),
        **{field: getattr(data_file, field) for field in DESCRIBED},
    }


def test_each_file_is_appended_as_pyiceberg_add_files_describes_it(tmp_path: Path) -> None:
    table = landed_table(tmp_path)
    rows = table.scan().to_arrow().num_rows
    rows_of_push_1 = table.scan(row_filter="push_offset = 1").to_arrow().num_rows
    assert 0 < rows_of_push_1 < rows
    landed = sorted(files_of(table))
    assert len(landed) >= 2  # one per metric kind: different partitions and columns
    by_add = [copied(location, "add") for location in landed]
    by_append = [copied(location, "append") for location in landed]
    table.add_files(by_add, snapshot_properties={"via": "add"}, check_duplicate_files=False)
    data_files.append_files(table, by_append, {"via": "append"})
    assert table.current_snapshot() is not None
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None and summary.additional_properties["via"] == "append"
    now = files_of(table)
    for original, added, appended in zip(landed, by_add, by_append, strict=True):
        assert described(now[appended]) == described(now[added]) == described(now[original])
    assert table.scan().to_arrow().num_rows == 3 * rows
    # A filter reads the appended files by their bounds as it reads the others.
    assert table.scan(row_filter="push_offset = 1").to_arrow().num_rows == 3 * rows_of_push_1


def test_a_file_whose_schema_does_not_fit_is_refused_after_one_that_did(tmp_path: Path) -> None:
    table = landed_table(tmp_path)
    landed = sorted(files_of(table))
    snapshots = len(table.metadata.snapshots)
    data_files.append_files(table, [copied(landed[0], "fits")], {})  # its schema is remembered
    assert len(table.metadata.snapshots) == snapshots + 1
    stranger = tmp_path / "stranger.parquet"
    pq.write_table(pa.table({"push_offset": ["not a number"]}), stranger)
    with pytest.raises(ValueError, match="push_offset"):
        data_files.append_files(table, [copied(landed[0], "again"), str(stranger)], {})
    assert len(table.refresh().metadata.snapshots) == snapshots + 1  # nothing of it appended


def test_an_append_copies_the_table_metadata_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each deep copy costs the whole history (every retained snapshot): pyiceberg made 16."""
    table = landed_table(tmp_path)
    landed = sorted(files_of(table))
    metadata_type = type(table.metadata)
    real_copy = metadata_type.model_copy
    deep_copies: list[int] = []

    def counted(self: Any, *, update: Any = None, deep: bool = False) -> Any:
        if deep:
            deep_copies.append(1)
        return real_copy(self, update=update, deep=deep)

    monkeypatch.setattr(metadata_type, "model_copy", counted)
    data_files.append_files(table, [copied(landed[0], "counted")], {"n": "1"})
    assert table.current_snapshot() is not None
    assert 1 <= len(deep_copies) <= 3  # this transaction's view, the catalog's commit
