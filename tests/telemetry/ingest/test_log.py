"""Appending and reading: offsets, group commit, acknowledgement after fsync."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TYPE_CHECKING

import pytest

from telemetry.ingest import (
    IngestLog,
    LogClosedError,
    LogFailedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from telemetry.ingest.record import HEADER, encode_frame
from telemetry.ingest.writer import SegmentWriter
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


async def test_append_then_read_round_trip(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path)
    offsets = await append_many(log, range(5))
    assert offsets == [0, 1, 2, 3, 4]
    assert log.log_end == 5
    records = log.read(0)
    assert [r.offset for r in records] == offsets
    for seq, record in enumerate(records):
        assert_matches(record, seq)
    assert log.read(5) == []
    assert [r.offset for r in log.read(3)] == [3, 4]
    await log.close()


async def test_open_creates_missing_directories(tmp_path: Path) -> None:
    directory = tmp_path / "data" / "log"
    log = await IngestLog.open(directory)
    assert await log.append(context(0), payload(0)) == 0
    await log.close()
    assert segment_files(directory) == ["00000000000000000000.log"]


async def test_offsets_are_monotonic_across_rolls_and_restarts(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    first = await append_many(log, range(20))
    await log.close()
    rolled = segment_files(tmp_path)
    assert len(rolled) >= 3
    log = await IngestLog.open(tmp_path, SMALL)
    assert log.log_end == 20
    second = await append_many(log, range(20, 40))
    assert first + second == list(range(40))
    assert len(segment_files(tmp_path)) > len(rolled)
    records = log.read(0, max_records=100)
    assert [r.offset for r in records] == list(range(40))
    for record in records:
        assert_matches(record, record.offset)
    await log.close()


async def test_segments_are_named_by_their_first_offset(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append_many(log, range(20))
    await log.close()
    for name in segment_files(tmp_path):
        base = int(name.removesuffix(".log"))
        log = await IngestLog.open(tmp_path, SMALL)
        assert log.read(base, max_records=1)[0].offset == base
        await log.close()


async def test_read_honours_max_records_and_max_bytes(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append_many(log, range(30))
    assert [r.offset for r in log.read(2, max_records=4)] == [2, 3, 4, 5]
    bodies = [encode_frame(s, context(s), payload(s))[1] - HEADER.size for s in range(4)]
    assert [r.offset for r in log.read(0, max_bytes=sum(bodies[:3]))] == [0, 1, 2]
    assert [r.offset for r in log.read(0, max_bytes=sum(bodies[:3]) - 1)] == [0, 1]
    # A record larger than max_bytes is still served alone, never stalls.
    assert [r.offset for r in log.read(9, max_bytes=1)] == [9]
    # Sequential reads across segment boundaries see every offset once.
    seen: list[int] = []
    position = 0
    while batch := log.read(position, max_records=7):
        seen += [r.offset for r in batch]
        position = batch[-1].offset + 1
    assert seen == list(range(30))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(31)
    await log.close()


async def test_group_commit_shares_fsyncs(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path)
    fsyncs = log.stats.fsyncs
    offsets = await asyncio.gather(*(log.append(context(i), payload(i)) for i in range(200)))
    assert sorted(offsets) == list(range(200))
    assert log.stats.fsyncs - fsyncs <= 10
    assert log.stats.largest_group >= 50
    records = log.read(0, max_records=500)
    assert [r.offset for r in records] == list(range(200))
    for offset, seq in zip(offsets, range(200), strict=True):
        assert_matches(records[offset], seq)
    await log.close()


async def test_acknowledged_only_after_fsync_and_never_read_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    entered = threading.Event()
    real_fsync = SegmentWriter._fsync

    def slow_fsync(self: SegmentWriter) -> None:
        entered.set()
        assert release.wait(10)
        real_fsync(self)

    monkeypatch.setattr(SegmentWriter, "_fsync", slow_fsync)
    log = await IngestLog.open(tmp_path)
    task = asyncio.create_task(log.append(context(0), payload(0)))
    assert await asyncio.to_thread(entered.wait, 10)
    await asyncio.sleep(0.05)
    assert not task.done()
    # The bytes are already in the file, but not synced: invisible to readers.
    assert (tmp_path / "00000000000000000000.log").stat().st_size > 0
    assert log.log_end == 0
    assert log.read(0) == []
    release.set()
    assert await task == 0
    assert [r.offset for r in log.read(0)] == [0]
    await log.close()


async def test_wait_for_wakes_on_commit_and_on_close(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path)
    waiter = asyncio.create_task(log.wait_for(0))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await log.append(context(0), payload(0))
    await asyncio.wait_for(waiter, 5)
    await log.wait_for(0)  # already durable: returns at once
    late = asyncio.create_task(log.wait_for(1))
    await asyncio.sleep(0.01)
    await log.close()
    with pytest.raises(LogClosedError):
        await asyncio.wait_for(late, 5)


async def test_close_finishes_queued_appends_and_refuses_later_ones(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path)
    pending = [asyncio.create_task(log.append(context(i), payload(i))) for i in range(10)]
    await asyncio.sleep(0)
    await asyncio.gather(log.close(), log.close())
    assert [t.result() for t in pending] == list(range(10))
    with pytest.raises(LogClosedError):
        await log.append(context(10), payload(10))
    await log.close()
    reopened = await IngestLog.open(tmp_path)
    assert reopened.log_end == 10
    await reopened.close()


async def test_failed_fsync_fails_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_fsync(self: SegmentWriter) -> None:
        raise OSError(5, "Input/output error")

    log = await IngestLog.open(tmp_path)
    await log.append(context(0), payload(0))
    monkeypatch.setattr(SegmentWriter, "_fsync", broken_fsync)
    with pytest.raises(LogFailedError):
        await log.append(context(1), payload(1))
    with pytest.raises(LogFailedError):
        await log.append(context(2), payload(2))
    assert log.log_end == 1
    assert [r.offset for r in log.read(0)] == [0]
    with pytest.raises(LogFailedError):
        await asyncio.wait_for(log.wait_for(1), 5)
    await log.close()


async def test_oversized_record_is_refused(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    with pytest.raises(RecordTooLargeError):
        await log.append(context(0), payload(0, SMALL.max_record_bytes))
    assert await log.append(context(0), payload(0)) == 0
    await log.close()


async def test_the_payload_reaches_writev_as_the_object_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/architecture.md: the payload is never copied before the write."""
    written: list[int] = []
    real_writev = os.writev

    def recording_writev(fd: int, buffers: list[bytes]) -> int:
        written.extend(id(b) for b in buffers)
        return real_writev(fd, buffers)

    monkeypatch.setattr(os, "writev", recording_writev)  # the writer calls os.writev
    log = await IngestLog.open(tmp_path)
    data = payload(7)
    assert await log.append(context(7), data) == 0
    await log.close()
    assert id(data) in written  # the very bytes object, not a copy joined with the head
