"""Stop paths of the ingest log: close with queued appends, cancelled saves and writes."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import TYPE_CHECKING

import pytest

from telemetry.ingest import IngestLog, LogClosedError
from telemetry.ingest import positions as positions_module
from telemetry.ingest.writer import SegmentWriter
from tests.telemetry.ingest.support import assert_matches, context, payload

if TYPE_CHECKING:
    from pathlib import Path


class Gate:
    """Holds a blocking call in its thread until released; counts overlapping calls."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0
        self.calls = 0

    def enter(self) -> None:
        with self._lock:
            self.inside += 1
            self.calls += 1
            self.most_inside = max(self.most_inside, self.inside)
        self.entered.set()
        assert self.release.wait(10)

    def leave(self) -> None:
        with self._lock:
            self.inside -= 1


async def test_close_with_appends_queued_behind_a_write_finishes_and_acknowledges_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate()
    real_fsync = SegmentWriter._fsync

    def held_fsync(self: SegmentWriter) -> None:
        if gate.calls == 0:
            gate.enter()
            gate.leave()
        real_fsync(self)

    monkeypatch.setattr(SegmentWriter, "_fsync", held_fsync)
    log = await IngestLog.open(tmp_path)
    first = asyncio.create_task(log.append(context(0), payload(0)))
    assert await asyncio.to_thread(gate.entered.wait, 10)
    # A group is being written; more appends queue behind it, then the server stops.
    queued = [asyncio.create_task(log.append(context(i), payload(i))) for i in range(1, 30)]
    await asyncio.sleep(0)
    closing = asyncio.create_task(log.close())
    await asyncio.sleep(0.05)
    gate.release.set()
    await asyncio.wait_for(closing, 10)
    assert await first == 0
    assert [await t for t in queued] == list(range(1, 30))
    with pytest.raises(LogClosedError):
        await log.append(context(30), payload(30))
    reopened = await IngestLog.open(tmp_path)
    records = reopened.read(0, max_records=100)
    assert [r.offset for r in records] == list(range(30))
    for record in records:
        assert_matches(record, record.offset)
    await reopened.close()


async def test_a_cancelled_close_still_closes_and_acknowledges_every_queued_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate()
    real_fsync = SegmentWriter._fsync

    def held_fsync(self: SegmentWriter) -> None:
        if gate.calls == 0:
            gate.enter()
            gate.leave()
        real_fsync(self)

    monkeypatch.setattr(SegmentWriter, "_fsync", held_fsync)
    log = await IngestLog.open(tmp_path)
    appends = [asyncio.create_task(log.append(context(i), payload(i))) for i in range(10)]
    assert await asyncio.to_thread(gate.entered.wait, 10)
    more = [asyncio.create_task(log.append(context(i), payload(i))) for i in range(10, 20)]
    await asyncio.sleep(0)
    closing = asyncio.create_task(log.close())
    await asyncio.sleep(0.05)
    closing.cancel()  # a second SIGTERM, a stop timeout: the close goes on regardless
    with pytest.raises(asyncio.CancelledError):
        await closing
    gate.release.set()
    await asyncio.wait_for(log.close(), 10)
    assert sorted([await t for t in appends + more]) == list(range(20))
    reopened = await IngestLog.open(tmp_path)
    assert reopened.log_end == 20
    await reopened.close()


async def test_a_cancelled_positions_save_is_never_overlapped_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await IngestLog.open(tmp_path)
    for seq in range(5):
        await log.append(context(seq), payload(seq))
    await log.register("a")
    gate = Gate()
    real_save = positions_module.save_positions

    def gated_save(directory: Path, positions: dict[str, int]) -> None:
        gate.enter()
        try:
            real_save(directory, positions)
        finally:
            gate.leave()

    monkeypatch.setattr(positions_module, "save_positions", gated_save)
    first = asyncio.create_task(log.commit("a", 3))
    assert await asyncio.to_thread(gate.entered.wait, 10)
    first.cancel()  # the host is cancelled while its commit's thread writes consumers.json.tmp
    second = asyncio.create_task(log.commit("a", 4))
    await asyncio.sleep(0.1)  # room for a second writer to start, if it could
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 10)
    assert gate.calls == 2
    assert gate.most_inside == 1
    saved = json.loads((tmp_path / "consumers.json").read_text())
    assert saved["consumers"] == {"a": 4}
    assert log.committed("a") == 4
    assert not (tmp_path / "consumers.json.tmp").exists()
    await log.close()


async def test_a_cancelled_commit_still_updates_the_view_once_its_save_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await IngestLog.open(tmp_path)
    for seq in range(3):
        await log.append(context(seq), payload(seq))
    await log.register("a")
    gate = Gate()
    real_save = positions_module.save_positions

    def gated_save(directory: Path, positions: dict[str, int]) -> None:
        gate.enter()
        try:
            real_save(directory, positions)
        finally:
            gate.leave()

    monkeypatch.setattr(positions_module, "save_positions", gated_save)
    commit = asyncio.create_task(log.commit("a", 2))
    assert await asyncio.to_thread(gate.entered.wait, 10)
    commit.cancel()
    await asyncio.sleep(0.05)
    assert not commit.done()  # the save's thread is still writing: the commit waits for it
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await commit
    assert log.committed("a") == 2
    assert json.loads((tmp_path / "consumers.json").read_text())["consumers"] == {"a": 2}
    await log.close()
