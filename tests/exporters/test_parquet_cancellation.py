"""Cancelling the Parquet landing at any await never publishes or commits half a generation."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from typing import TYPE_CHECKING

import pytest

from exporters.api import TransientExportError
from exporters.parquet import ParquetExporter
from exporters.parquet.pool import WorkerHandle
from exporters.parquet.worker import WorkerConfig
from telemetry.ingest import IngestLog
from telemetry.server.config import ExporterSettings
from telemetry.server.exporter_host import ExporterHost
from tests.exporters.parquet_support import every_file_reads, land_async, parquet_files, read_rows
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, push
from tests.telemetry.ingest.support import context

if TYPE_CHECKING:
    from pathlib import Path

    from exporters.api import LoggedPush

#: Enough rows that sealing (writing the buffered row groups, fsync) takes a while.
PUSHES = 120


def pushes(first: int, count: int) -> list[LoggedPush]:
    data = (PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes())
    return [push(data[i % 2], offset=first + i) for i in range(count)]


def rows_per_offset(first: int, count: int) -> dict[int, int]:
    return {first + i: 10 if i % 2 == 0 else 15 for i in range(count)}


async def _until(condition: object, limit: int = 200_000) -> None:
    for _ in range(limit):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def _export_all(exporter: ParquetExporter) -> None:
    for first in range(0, PUSHES, 20):
        await exporter.export(pushes(first, 20))


def assert_landed_exactly_once(root: Path) -> None:
    landed = collections.Counter(r["push_offset"] for r in read_rows(root))
    assert landed == rows_per_offset(0, PUSHES)
    assert every_file_reads(root) == sum(landed.values())


async def test_a_flush_cancelled_while_sealing_publishes_nothing_and_the_restart_lands_once(
    tmp_path: Path,
) -> None:
    exporter = ParquetExporter({"path": str(tmp_path), "workers": 2, "max_file_age_s": 3600})
    await exporter.start()
    try:
        await _export_all(exporter)
        await _until(lambda: all(f.done() for f in exporter._gen_batches))
        flush = asyncio.create_task(exporter.flush())
        await _until(lambda: all(h.in_flight for h in exporter._handles))  # the seals are out
        flush.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flush
        # Nothing is published, so nothing may be declared durable: not now, not after
        # another flush (which must not re-seal an empty generation and call it done).
        assert exporter.durable_offset() == 0
        with pytest.raises(TransientExportError, match="cancelled"):
            await exporter.flush()
        assert exporter.durable_offset() == 0
        assert exporter.failure is None  # given up for this run, not failed
    finally:
        await exporter.close()
    assert exporter.durable_offset() == 0
    assert parquet_files(tmp_path) == []
    # The host committed at most 0, so the next start replays everything.
    restarted = await land_async(tmp_path, [pushes(0, PUSHES)])
    assert restarted.stats.replayed_pushes_skipped == 0
    assert_landed_exactly_once(tmp_path)


async def test_a_flush_cancelled_with_batches_in_flight_never_leaks_the_cancellation(
    tmp_path: Path,
) -> None:
    exporter = ParquetExporter({"path": str(tmp_path), "workers": 1, "max_file_age_s": 3600})
    await exporter.start()
    try:
        await _export_all(exporter)
        assert not all(f.done() for f in exporter._gen_batches)  # still flattening
        flush = asyncio.create_task(exporter.flush())
        await asyncio.sleep(0)
        flush.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flush
        assert exporter.durable_offset() == 0
        # The next caller (the host's stop) gets an export error, never a CancelledError.
        with pytest.raises(TransientExportError):
            await exporter.flush()
        with pytest.raises(TransientExportError):
            await exporter.export(pushes(PUSHES, 1))
    finally:
        await exporter.close()
    assert parquet_files(tmp_path) == []
    await land_async(tmp_path, [pushes(0, PUSHES)])
    assert_landed_exactly_once(tmp_path)


async def test_a_close_cancelled_while_sealing_still_stops_the_workers_and_unlocks(
    tmp_path: Path,
) -> None:
    exporter = ParquetExporter({"path": str(tmp_path), "workers": 2, "max_file_age_s": 3600})
    await exporter.start()
    await _export_all(exporter)
    await _until(lambda: all(f.done() for f in exporter._gen_batches))
    close = asyncio.create_task(exporter.close())
    await _until(lambda: all(h.in_flight for h in exporter._handles))
    close.cancel()
    with pytest.raises(asyncio.CancelledError):
        await close
    assert exporter.durable_offset() in (0, PUSHES)  # published whole, or not at all
    published = exporter.durable_offset() == PUSHES
    # The landing is unlocked and its workers are gone: a new exporter can start at once.
    await land_async(tmp_path, [] if published else [pushes(0, PUSHES)])
    assert_landed_exactly_once(tmp_path)


async def test_a_reply_for_a_cancelled_request_does_not_shift_later_replies(
    tmp_path: Path,
) -> None:
    (tmp_path / "_landing" / "staging").mkdir(parents=True)
    handle = WorkerHandle(
        WorkerConfig(
            root=str(tmp_path),
            worker_id=0,
            token="t",
            raw=False,
            compression_level=None,
            row_group_rows=1000,
        )
    )
    await asyncio.to_thread(handle.start)
    handle.attach(asyncio.get_running_loop())
    try:
        batch = handle.request(("batch", [dataclasses.astuple(p) for p in pushes(0, 4)]))
        batch.cancel()  # its awaiter was cancelled: the worker still answers it
        seal = handle.request(("seal", 0, 3))
        reply = await asyncio.wait_for(seal, 30)
        assert reply[0] == "sealed"
        assert sum(f.rows for f in reply[1]) == sum(rows_per_offset(0, 4).values())
        assert handle.in_flight == 0
        second = await asyncio.wait_for(handle.request(("seal", 4, 4)), 30)
        assert second == ("sealed", [])
    finally:
        await handle.stop()


HOST = ExporterSettings(name="landing", type="parquet", batch_max_records=20)


async def _logged(tmp_path: Path) -> IngestLog:
    log = await IngestLog.open(tmp_path / "log")
    data = (PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes())
    for seq in range(PUSHES):
        await log.append(context(seq), data[seq % 2])
    return log


def published_end(root: Path) -> int:
    """One past the highest offset in a published file (0 if none)."""
    rows = read_rows(root) if parquet_files(root) else []
    return max((r["push_offset"] for r in rows), default=-1) + 1


async def _replay_until_landed(log: IngestLog, root: Path) -> None:
    options = {"path": str(root), "workers": 2, "max_file_age_s": 3600}
    host = ExporterHost(HOST, ParquetExporter(options), log)
    await host.start()
    await asyncio.wait_for(_wait_exported(host), 30)
    await host.stop()
    assert log.committed(host.consumer) == PUSHES


async def _wait_exported(host: ExporterHost) -> None:
    while host.position < PUSHES:
        await asyncio.sleep(0.01)


async def test_a_host_stop_cancelled_while_sealing_commits_nothing_unpublished(
    tmp_path: Path,
) -> None:
    root = tmp_path / "landing"
    log = await _logged(tmp_path)
    try:
        exporter = ParquetExporter({"path": str(root), "workers": 2, "max_file_age_s": 3600})
        host = ExporterHost(HOST, exporter, log)
        await host.start()
        await asyncio.wait_for(_wait_exported(host), 30)
        await _until(lambda: all(f.done() for f in exporter._gen_batches))
        stopping = asyncio.create_task(host.stop())
        await _until(lambda: all(h.in_flight for h in exporter._handles))  # sealing
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        # Nothing was published, so nothing is committed; the exporter is closed.
        assert parquet_files(root) == []
        assert log.committed(host.consumer) == 0
        # The next start (same log, same landing) lands every push once.
        await _replay_until_landed(log, root)
    finally:
        await log.close()
    assert_landed_exactly_once(root)


@pytest.mark.parametrize("drain_timeout_s", [0.001, 0.05, 0.3])
async def test_a_drain_cut_short_never_commits_past_published_rows(
    tmp_path: Path, drain_timeout_s: float
) -> None:
    root = tmp_path / "landing"
    log = await _logged(tmp_path)
    try:
        # Small generations: the timeout lands in exports, seals, publications or commits.
        options = {"path": str(root), "workers": 2, "max_rows_per_file": 50}
        host = ExporterHost(HOST, ParquetExporter(options), log)
        await host.start()
        await host.stop(drain_timeout_s=drain_timeout_s)
        assert log.committed(host.consumer) <= published_end(root)
        await _replay_until_landed(log, root)
    finally:
        await log.close()
    assert_landed_exactly_once(root)


async def test_a_drain_timeout_landing_in_a_seal_during_export_commits_nothing_unpublished(
    tmp_path: Path,
) -> None:
    root = tmp_path / "landing"
    log = await _logged(tmp_path)
    try:
        # Every export seals its generation, so the host's task is caught sealing.
        options = {"path": str(root), "workers": 2, "max_pending_bytes": 1}
        exporter = ParquetExporter(options)
        host = ExporterHost(HOST, exporter, log)
        await host.start()
        await _until(
            lambda: (
                exporter._gen_lock.locked()
                and exporter._gen_first is not None
                and all(h.in_flight for h in exporter._handles)
            )
        )
        sealing = exporter._gen_first
        await host.stop(drain_timeout_s=0.0)  # the drain times out: the task is cancelled
        assert exporter.durable_offset() == sealing
        assert log.committed(host.consumer) == sealing <= published_end(root)
        await _replay_until_landed(log, root)
    finally:
        await log.close()
    assert_landed_exactly_once(root)
