"""The host task never dies quietly: failures are logged once, counted, retried and reported."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

from telemetry.ingest import IngestLog
from telemetry.server.exporter_host import FAILING_AFTER, ExporterHost
from tests.telemetry.ingest.support import SMALL
from tests.telemetry.server.test_exporter_host import Recorder, append, settings, until

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import pytest

    from exporters.api import LoggedPush


class FlakyDurability(Recorder):
    """A buffering exporter whose ``durable_offset`` raises the first ``broken`` times."""

    def __init__(self, broken: int) -> None:
        super().__init__()
        self.broken = broken

    def durable_offset(self) -> int:
        if self.broken > 0:
            self.broken -= 1
            raise RuntimeError("durability unknown")
        return self.offsets[-1] + 1 if self.offsets else 0


class Bug(BaseException):
    """Not an ``Exception``: the kind of error the host does not retry."""


class Buggy(Recorder):
    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        raise Bug("a bug in the exporter")


class Stuck(Recorder):
    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        await asyncio.Event().wait()


async def test_durable_offset_errors_are_logged_once_retried_and_reported_until_they_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="telemetry.server.exporter_host")
    log = await IngestLog.open(tmp_path, SMALL)
    await append(log, range(5))
    exporter = FlakyDurability(broken=FAILING_AFTER + 2)
    # Backoff slow enough that the failing streak is seen before it ends.
    host = ExporterHost(settings(retry_initial_ms=100, retry_max_ms=400), exporter, log)
    await host.start()
    try:
        await until(lambda: host.problem() is not None or exporter.broken == 0)
        problems = [host.problem()]
        await until(lambda: host.committed == 5)
        assert host.problem() is None
        assert host.stats.failures == FAILING_AFTER + 2
        assert host.died is None
    finally:
        await host.stop()
        await log.close()
    assert any(p is not None and "is failing" in p and "durability unknown" in p for p in problems)
    failed = [r for r in caplog.records if "exporter rec failed" in r.getMessage()]
    assert len(failed) == 1
    assert "RuntimeError: durability unknown" in failed[0].getMessage()
    assert any("exporter rec recovered" in r.getMessage() for r in caplog.records)


class _FailingCommits:
    """The log, its first commits past offset 0 failing as a full disk fails them.

    A wrapper, not a patched method: ``IngestLog`` is compiled (setup.py),
    so its methods cannot be replaced on an instance.
    """

    def __init__(self, log: IngestLog, failures: int) -> None:
        self._log = log
        self.left = failures

    def __getattr__(self, name: str) -> object:
        return getattr(self._log, name)

    async def commit(self, consumer: str, next_offset: int) -> None:
        if self.left > 0 and next_offset > 0:
            self.left -= 1
            raise OSError(28, "No space left on device")
        await self._log.commit(consumer, next_offset)


async def test_commit_errors_do_not_end_the_host_task(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append(log, range(3))
    recorder = Recorder()
    failing = _FailingCommits(log, 4)
    host = ExporterHost(settings(), recorder, cast("IngestLog", failing))
    await host.start()
    try:
        await until(lambda: host.committed == 3)
        assert recorder.offsets == [0, 1, 2]  # exported once, committed after the retries
        assert host.stats.failures == 4
        assert host.died is None
    finally:
        await host.stop()
        await log.close()


async def test_a_dying_host_task_is_logged_at_once_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append(log, range(2))
    host = ExporterHost(settings(), Buggy(), log)
    await host.start()
    try:
        await until(lambda: host.died is not None)
        # Logged when it happened, not at shutdown.
        [record] = [r for r in caplog.records if "its task died" in r.getMessage()]
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None
        problem = host.problem()
        assert problem is not None
        assert "task died" in problem
        assert "a bug in the exporter" in problem
        assert host.failure == problem
    finally:
        await host.stop()
        await log.close()


async def test_an_exporter_behind_with_no_progress_is_reported_stalled(tmp_path: Path) -> None:
    now = [1000.0]
    log = await IngestLog.open(tmp_path, SMALL)
    host = ExporterHost(settings(stall_timeout_s=60.0), Stuck(), log, clock=lambda: now[0])
    await host.start()
    try:
        await append(log, range(3))
        now[0] += 59
        assert host.problem() is None
        now[0] += 2
        problem = host.problem()
        assert problem is not None
        assert "stalled" in problem
        assert "3 pushes behind" in problem
    finally:
        await host.stop(drain_timeout_s=0.1)
        await log.close()
    assert log.committed(host.consumer) == 0  # never exported: never committed


async def test_an_idle_exporter_that_is_caught_up_is_never_stalled(tmp_path: Path) -> None:
    now = [1000.0]
    log = await IngestLog.open(tmp_path, SMALL)
    recorder = Recorder()
    host = ExporterHost(settings(stall_timeout_s=60.0), recorder, log, clock=lambda: now[0])
    await host.start()
    try:
        now[0] += 3600
        await asyncio.sleep(1.2)  # one idle poll notes that it is caught up
        await append(log, range(1))
        assert host.problem() is None
        await until(lambda: host.committed == 1)
        assert host.problem() is None
    finally:
        await host.stop()
        await log.close()
