"""The log id: created once with the directory, the same after every reopen, new for a new log."""

from __future__ import annotations

import shutil
import uuid
from typing import TYPE_CHECKING

import pytest

from telemetry.ingest import IngestLog
from telemetry.ingest.identity import FILE_NAME, load_or_create_log_id
from tests.telemetry.ingest.support import append_many

if TYPE_CHECKING:
    from pathlib import Path


async def test_the_id_survives_reopening_and_appends(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path / "log")
    first = log.log_id
    assert uuid.UUID(first).version == 4
    await append_many(log, range(3))
    await log.close()
    assert (tmp_path / "log" / FILE_NAME).read_text().strip() == first
    reopened = await IngestLog.open(tmp_path / "log")
    try:
        assert reopened.log_id == first
        assert reopened.log_end == 3
    finally:
        await reopened.close()


async def test_a_deleted_directory_comes_back_as_another_log(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path / "log")
    first = log.log_id
    await log.close()
    shutil.rmtree(tmp_path / "log")
    again = await IngestLog.open(tmp_path / "log")
    try:
        assert again.log_id != first
        assert again.log_end == 0
    finally:
        await again.close()


async def test_a_log_from_before_ids_gets_one_and_keeps_its_records(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path / "log")
    await append_many(log, range(2))
    await log.close()
    (tmp_path / "log" / FILE_NAME).unlink()  # as written before log ids existed
    upgraded = await IngestLog.open(tmp_path / "log")
    try:
        assert (tmp_path / "log" / FILE_NAME).read_text().strip() == upgraded.log_id
        assert [r.offset for r in upgraded.read(0)] == [0, 1]
    finally:
        await upgraded.close()


def test_a_crashed_creation_leaves_no_trace_and_an_existing_id_wins(tmp_path: Path) -> None:
    (tmp_path / (FILE_NAME + ".tmp")).write_text("half")
    created = load_or_create_log_id(tmp_path)
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()
    assert load_or_create_log_id(tmp_path) == created


def test_an_unreadable_id_is_refused_not_replaced(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("not-a-uuid\n")
    with pytest.raises(ValueError, match="not a log id"):
        load_or_create_log_id(tmp_path)
    assert (tmp_path / FILE_NAME).read_text() == "not-a-uuid\n"
