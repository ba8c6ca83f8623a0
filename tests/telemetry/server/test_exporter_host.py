"""The exporter host: at least once, in log order, committed after export, resumed after restart."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from exporters.api import LoggedPush, PermanentExportError, TransientExportError
from telemetry.ingest import IngestLog
from telemetry.server.config import ExporterSettings
from telemetry.server.exporter_host import ExporterHost
from tests.telemetry.ingest.support import SMALL, context, payload

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

FAST = {"retry_initial_ms": 1, "retry_max_ms": 4}


class Recorder:
    """Records what it is given; fails the first ``failures`` calls with ``error``."""

    def __init__(self, failures: int = 0, error: Exception | None = None) -> None:
        self.batches: list[list[int]] = []
        self.failures = failures
        self.error = error or TransientExportError("sink unavailable")
        self.calls = 0
        self.started = self.flushed = self.closed = False

    async def start(self) -> None:
        self.started = True

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            raise self.error
        self.batches.append([push.offset for push in batch])

    async def flush(self) -> None:
        self.flushed = True

    async def close(self) -> None:
        self.closed = True

    @property
    def offsets(self) -> list[int]:
        return [offset for batch in self.batches for offset in batch]


def settings(name: str = "rec", **overrides: Any) -> ExporterSettings:
    return ExporterSettings(name=name, type="test", **{**FAST, **overrides})


async def append(log: IngestLog, seqs: range) -> list[int]:
    return [await log.append(context(s), payload(s)) for s in seqs]


async def until(condition: Any, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


async def test_exports_everything_in_order_in_batches_and_commits(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    offsets = await append(log, range(25))
    recorder = Recorder()
    host = ExporterHost(settings(batch_max_records=10), recorder, log)
    await host.start()
    await until(lambda: recorder.offsets == offsets)
    assert [len(b) for b in recorder.batches] == [10, 10, 5]
    await until(lambda: log.committed("exporter:rec") == offsets[-1] + 1)
    await until(lambda: host.lag == 0)  # the host notes its commit once the log has it
    # New pushes arriving later are picked up without polling delays.
    more = await append(log, range(25, 30))
    await until(lambda: recorder.offsets[-5:] == more)
    await host.stop()
    assert recorder.started and recorder.flushed and recorder.closed
    assert host.stats.exported_pushes == 30
    await log.close()


async def test_transient_failures_are_retried_and_nothing_is_skipped(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    offsets = await append(log, range(5))
    recorder = Recorder(failures=3)
    host = ExporterHost(settings(), recorder, log)
    await host.start()
    await until(lambda: recorder.offsets == offsets)
    assert recorder.calls == 4
    assert host.stats.failures == 3
    assert host.stats.skipped_pushes == 0
    await host.stop()
    await log.close()


async def test_a_permanent_failure_skips_that_batch_only(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    first = await append(log, range(3))
    recorder = Recorder(failures=1, error=PermanentExportError("cannot take these"))
    host = ExporterHost(settings(), recorder, log)
    await host.start()
    await until(lambda: log.committed("exporter:rec") == first[-1] + 1)
    assert recorder.offsets == []
    assert host.stats.skipped_pushes == 3
    later = await append(log, range(3, 5))
    await until(lambda: recorder.offsets == later)
    await host.stop()
    await log.close()


async def test_a_failing_exporter_does_not_block_appends_or_other_exporters(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    broken = Recorder(failures=10**9)
    healthy = Recorder()
    hosts = [
        ExporterHost(settings("broken"), broken, log),
        ExporterHost(settings("healthy"), healthy, log),
    ]
    for host in hosts:
        await host.start()
    offsets = await append(log, range(20))
    await until(lambda: healthy.offsets == offsets)
    assert broken.offsets == []
    assert hosts[0].lag == 20
    assert log.committed("exporter:broken") == 0
    for host in hosts:
        await host.stop(drain_timeout_s=0.2)
    await log.close()


async def test_resumes_from_the_committed_position_after_a_restart(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    offsets = await append(log, range(10))
    first = Recorder()
    host = ExporterHost(settings(), first, log)
    await host.start()
    await until(lambda: log.committed("exporter:rec") == offsets[-1] + 1)
    await host.stop()
    await log.close()

    log = await IngestLog.open(tmp_path, SMALL)
    more = await append(log, range(10, 15))
    second = Recorder()
    host = ExporterHost(settings(), second, log)
    await host.start()
    await until(lambda: second.offsets == more)
    assert first.offsets == offsets  # nothing delivered twice after a clean stop
    await host.stop()
    await log.close()


async def test_stop_drains_what_is_logged(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    slow_batches: list[int] = []

    class Slow(Recorder):
        async def export(self, batch: Sequence[LoggedPush], /) -> None:
            await asyncio.sleep(0.01)
            slow_batches.append(len(batch))
            await super().export(batch)

    recorder = Slow()
    host = ExporterHost(settings(batch_max_records=2), recorder, log)
    await host.start()
    offsets = await append(log, range(8))
    await host.stop(drain_timeout_s=10)
    assert recorder.offsets == offsets
    assert log.committed("exporter:rec") == offsets[-1] + 1
    await log.close()


async def test_stop_gives_up_on_a_stuck_exporter_without_committing(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append(log, range(3))
    hang = asyncio.Event()

    class Stuck(Recorder):
        async def export(self, batch: Sequence[LoggedPush], /) -> None:
            await hang.wait()

    recorder = Stuck()
    host = ExporterHost(settings(), recorder, log)
    await host.start()
    await asyncio.sleep(0.05)
    await host.stop(drain_timeout_s=0.1)
    assert recorder.closed
    assert log.committed("exporter:rec") == 0  # replayed after the next start
    await log.close()


@pytest.mark.parametrize("failures", [0, 2])
async def test_export_latency_is_observed(tmp_path: Path, failures: int) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append(log, range(4))
    recorder = Recorder(failures=failures)
    host = ExporterHost(settings(), recorder, log)
    await host.start()
    await until(lambda: host.stats.exported_batches >= 1)
    assert sum(host.stats.export_bucket_counts) == host.stats.exported_batches
    assert host.stats.failures == failures
    await host.stop()
    await log.close()


class Buffering(Recorder):
    """Lands only on ``flush`` (or when told), like the landing's generations."""

    def __init__(self) -> None:
        super().__init__()
        self.landed = 0

    def durable_offset(self) -> int:
        return self.landed

    async def flush(self) -> None:
        await super().flush()
        if self.offsets:
            self.landed = self.offsets[-1] + 1


async def test_a_buffering_exporter_is_committed_only_as_far_as_it_landed(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    offsets = await append(log, range(6))
    exporter = Buffering()
    host = ExporterHost(settings(), exporter, log)
    await host.start()
    await until(lambda: exporter.offsets == offsets)
    await asyncio.sleep(0.05)
    assert log.committed("exporter:rec") == 0  # exported, but nothing landed yet
    assert host.lag == 6
    exporter.landed = offsets[3]  # landed on its own timer, while the host is idle
    await until(lambda: log.committed("exporter:rec") == offsets[3], timeout_s=5)
    await host.stop()  # flush lands the rest, then the host commits it
    assert log.committed("exporter:rec") == offsets[-1] + 1
    await log.close()
