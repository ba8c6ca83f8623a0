"""Opening a damaged log: torn and corrupt tails are reported and cut, never served."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import pytest

from telemetry.ingest import IngestLog, LogCorruptionError
from telemetry.ingest.record import HEADER, encode_frame
from tests.telemetry.ingest.support import (
    SMALL,
    append_many,
    assert_matches,
    context,
    payload,
    segment_files,
)

if TYPE_CHECKING:
    from pathlib import Path

FIRST = "00000000000000000000.log"
RECOVERY_LOGGER = "telemetry.ingest.recovery"


def _frame_length(seq: int) -> int:
    return encode_frame(seq, context(seq), payload(seq))[1]


async def _five_records(directory: Path) -> int:
    """Write records 0..4 into one segment; return the byte position of record 4."""
    log = await IngestLog.open(directory)
    await append_many(log, range(5))
    await log.close()
    return sum(_frame_length(s) for s in range(4))


async def _assert_continues_at_4(directory: Path) -> None:
    log = await IngestLog.open(directory)
    assert log.log_end == 4
    assert await log.append(context(4), payload(4)) == 4
    records = log.read(0)
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    for record in records:
        assert_matches(record, record.offset)
    await log.close()


async def test_torn_tail_is_reported_and_truncated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    last = await _five_records(tmp_path)
    path = tmp_path / FIRST
    os.truncate(path, path.stat().st_size - 10)
    with caplog.at_level(logging.WARNING, logger=RECOVERY_LOGGER):
        log = await IngestLog.open(tmp_path)
    assert f"byte {last}" in caplog.text
    assert "torn record" in caplog.text
    assert path.stat().st_size == last
    assert log.stats.recovery_truncated_bytes == _frame_length(4) - 10
    assert log.log_end == 4
    assert [r.offset for r in log.read(0)] == [0, 1, 2, 3]
    await log.close()
    await _assert_continues_at_4(tmp_path)


async def test_torn_header_is_reported_and_truncated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    last = await _five_records(tmp_path)
    path = tmp_path / FIRST
    os.truncate(path, last + 3)
    with caplog.at_level(logging.WARNING, logger=RECOVERY_LOGGER):
        await _assert_continues_at_4(tmp_path)
    assert f"byte {last}" in caplog.text
    assert "torn record header" in caplog.text


async def test_flipped_byte_in_last_record_is_reported_and_truncated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    last = await _five_records(tmp_path)
    path = tmp_path / FIRST
    with path.open("r+b") as f:
        f.seek(last + HEADER.size + 100)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    with caplog.at_level(logging.WARNING, logger=RECOVERY_LOGGER):
        await _assert_continues_at_4(tmp_path)
    assert f"byte {last}" in caplog.text
    assert "CRC32C mismatch" in caplog.text


async def test_zero_filled_tail_is_reported_and_truncated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _five_records(tmp_path)
    path = tmp_path / FIRST
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(bytes(4096))  # what a crash can leave after the file size was extended
    with caplog.at_level(logging.WARNING, logger=RECOVERY_LOGGER):
        log = await IngestLog.open(tmp_path)
    assert f"byte {size}" in caplog.text
    assert "zero-filled" in caplog.text
    assert path.stat().st_size == size
    assert log.log_end == 5
    assert await log.append(context(5), payload(5)) == 5
    await log.close()


async def test_intact_log_reopens_without_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _five_records(tmp_path)
    with caplog.at_level(logging.WARNING):
        log = await IngestLog.open(tmp_path)
    assert caplog.records == []
    assert log.log_end == 5
    assert log.stats.recovery_truncated_bytes == 0
    await log.close()


async def test_corruption_in_an_older_segment_stops_readers_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append_many(log, range(20))
    await log.close()
    names = segment_files(tmp_path)
    second_base = int(names[1].removesuffix(".log"))
    with (tmp_path / FIRST).open("r+b") as f:
        f.seek(_frame_length(0) + HEADER.size + 50)  # inside record 1
        f.write(b"\xff")
    log = await IngestLog.open(tmp_path, SMALL)
    assert log.log_end == 20  # only the last segment is scanned at open
    assert [r.offset for r in log.read(0, max_records=1)] == [0]
    with caplog.at_level(logging.ERROR), pytest.raises(LogCorruptionError) as info:
        log.read(0)
    assert info.value.offset == 1
    assert info.value.position == _frame_length(0)
    assert info.value.next_readable_offset == second_base
    assert "CRC32C" in caplog.text
    assert log.stats.corrupt_reads == 1
    # Past the damaged segment, reading goes on.
    assert log.read(second_base)[0].offset == second_base
    await log.close()


async def test_lost_segments_never_cause_offset_reuse(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = await IngestLog.open(tmp_path)
    await append_many(log, range(6))
    await log.commit("parquet", 6)
    await log.close()
    for name in segment_files(tmp_path):
        (tmp_path / name).unlink()
    with caplog.at_level(logging.WARNING, logger=RECOVERY_LOGGER):
        log = await IngestLog.open(tmp_path)
    assert log.log_end == 6
    assert await log.append(context(6), payload(6)) == 6
    assert log.committed("parquet") == 6
    await log.close()
    assert "committed up to 6" in caplog.text
    caplog.clear()

    # Now a tail lost while a consumer had read past it.
    log = await IngestLog.open(tmp_path)
    await append_many(log, range(7, 10))
    await log.commit("parquet", 10)
    await log.close()
    newest = tmp_path / segment_files(tmp_path)[-1]
    os.truncate(newest, 0)
    with caplog.at_level(logging.WARNING, logger=RECOVERY_LOGGER):
        log = await IngestLog.open(tmp_path)
    assert "no offset is reused" in caplog.text
    assert await log.append(context(10), payload(10)) == 10
    await log.close()
