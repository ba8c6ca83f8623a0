"""The ingest log's writer thread: cancellation mid-write, failures, and its stop."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

import pytest

from telemetry.ingest import IngestLog, LogClosedError, LogFailedError
from telemetry.ingest.writer import SegmentWriter
from telemetry.ingest.writer_thread import GroupWrite, WriterThread
from tests.telemetry.ingest.support import context, payload

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.ingest.writer import SegmentState


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ingest-log-writer"]


async def test_a_writer_cancelled_mid_write_still_publishes_and_answers_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group in the thread lands and is acknowledged; the appends behind it are failed."""
    entered, release = threading.Event(), threading.Event()
    real_fsync = SegmentWriter._fsync
    held: list[bool] = []

    def held_fsync(self: SegmentWriter) -> None:
        if not held:
            held.append(True)
            entered.set()
            assert release.wait(10)
        real_fsync(self)

    monkeypatch.setattr(SegmentWriter, "_fsync", held_fsync)
    log = await IngestLog.open(tmp_path)
    in_thread = [asyncio.create_task(log.append(context(i), payload(i))) for i in range(3)]
    assert await asyncio.to_thread(entered.wait, 10)
    behind = [asyncio.create_task(log.append(context(i), payload(i))) for i in range(3, 6)]
    await asyncio.sleep(0)
    writer = log._writer_task
    writer.cancel()  # as asyncio.run cancels what is left when the server's loop ends
    await asyncio.sleep(0.05)
    assert not writer.done()  # it waits out the write before it stops
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(writer, 10)
    assert [await asyncio.wait_for(task, 10) for task in in_thread] == [0, 1, 2]
    for task in behind:
        with pytest.raises(LogClosedError):
            await asyncio.wait_for(task, 10)
    assert log.log_end == 3
    assert [record.offset for record in log.read(0)] == [0, 1, 2]
    await asyncio.wait_for(log.close(), 10)
    reopened = await IngestLog.open(tmp_path)
    assert reopened.log_end == 3
    await reopened.close()


async def test_a_failed_write_is_logged_when_it_happens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_writev(self: SegmentWriter, *args: object) -> list[SegmentState]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SegmentWriter, "write_group", broken_writev)
    log = await IngestLog.open(tmp_path)
    with caplog.at_level(logging.ERROR, logger="telemetry.ingest.log"):
        with pytest.raises(LogFailedError, match="No space left"):
            await log.append(context(0), payload(0))
        assert any("No space left" in r.getMessage() for r in caplog.records)
    assert log.failure is not None
    await asyncio.wait_for(log.close(), 10)


async def test_close_stops_the_writer_thread(tmp_path: Path) -> None:
    before = len(_writer_threads())
    log = await IngestLog.open(tmp_path)
    assert len(_writer_threads()) == before + 1
    await log.append(context(0), payload(0))
    await asyncio.wait_for(log.close(), 10)
    assert len(_writer_threads()) == before


def test_writes_run_in_submission_order_and_a_failure_does_not_stop_the_thread() -> None:
    calls: list[int] = []

    def write_group(parts: list[bytes], lengths: list[int], first: int) -> list[SegmentState]:
        calls.append(first)
        if first == 1:
            raise OSError(5, "Input/output error")
        return []

    async def run() -> None:
        thread = WriterThread(write_group, "test-writer")
        loop = asyncio.get_running_loop()
        finished: list[int] = []

        def finish(job: GroupWrite) -> None:
            finished.append(len(finished))
            assert job.done

        jobs = [thread.submit(loop, [], [], first, finish) for first in range(3)]
        for job in jobs:
            assert await asyncio.wait_for(job.finished(), 10) is None
        thread.stop()
        assert [job.error is None for job in jobs] == [True, False, True]
        assert isinstance(jobs[1].error, OSError)
        assert finished == [0, 1, 2]

    asyncio.run(run())
    assert calls == [0, 1, 2]


def test_a_write_finishing_after_its_loop_closed_is_dropped_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The thread outlives a loop that closed mid-write, and takes the next write."""
    entered, release = threading.Event(), threading.Event()

    def write_group(parts: list[bytes], lengths: list[int], first: int) -> list[SegmentState]:
        if first == 0:
            entered.set()
            assert release.wait(10)
        return []

    thread = WriterThread(write_group, "test-writer")

    async def submit_and_leave() -> None:
        thread.submit(asyncio.get_running_loop(), [], [], 0, lambda job: None)
        assert await asyncio.to_thread(entered.wait, 10)

    asyncio.run(submit_and_leave())
    release.set()

    async def next_write() -> None:
        job = thread.submit(asyncio.get_running_loop(), [], [], 1, lambda job: None)
        assert await asyncio.wait_for(job.finished(), 10) is None
        assert job.done and job.error is None

    with caplog.at_level(logging.ERROR):
        asyncio.run(next_write())
    thread.stop()
    assert not caplog.records


def test_an_error_in_finish_is_reported_to_the_loop_and_releases_the_waiter() -> None:
    def write_group(parts: list[bytes], lengths: list[int], first: int) -> list[SegmentState]:
        return []

    def finish(job: GroupWrite) -> None:
        raise ValueError("a bug in the bookkeeping")

    reported: list[BaseException | None] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reported.append(context.get("exception")))
        thread = WriterThread(write_group, "test-writer")
        job = thread.submit(loop, [], [], 0, finish)
        assert await asyncio.wait_for(job.finished(), 10) is None
        thread.stop()

    asyncio.run(run())
    assert len(reported) == 1
    assert isinstance(reported[0], ValueError)


async def test_appends_of_the_step_after_the_writer_wakes_join_its_group(tmp_path: Path) -> None:
    """The writer lets the loop run one step before it takes a group."""
    log = await IngestLog.open(tmp_path)
    await log.append(context(0), payload(0))  # the writer is idle again after this group
    groups_before = log.stats.group_commits
    loop = asyncio.get_running_loop()
    appended: list[asyncio.Future[None]] = []
    _, first = log.append_nowait(context(1), payload(1))  # wakes the writer
    loop.call_soon(lambda: appended.append(log.append_nowait(context(2), payload(2))[1]))
    await asyncio.wait_for(first, 10)
    assert appended
    await asyncio.wait_for(appended[0], 10)
    assert log.stats.group_commits == groups_before + 1
    assert log.stats.largest_group >= 2
    await log.close()
