"""``/readyz`` tells the truth: a log that cannot append, a failing exporter; and it recovers."""

from __future__ import annotations

import logging
import traceback
from typing import TYPE_CHECKING, Any

import pytest

from exporters import registry
from exporters.testing import InMemoryExporter
from telemetry.ingest import LogClosedError
from tests.telemetry.ingest.support import context, payload
from tests.telemetry.server_support import (
    INTERVAL_MS,
    exported_rows,
    get,
    push_names,
    ready_is,
    running,
)
from tests.telemetry.tiny_fs import fill, resize, tiny_fs

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = {interval}
[exporters.landing]                # only the exporter under test
enabled = false
[exporters.out]
type = "jsonl"
retry_initial_ms = 10
retry_max_ms = 50
[exporters.out.options]
path = "{out}"
"""


def config(out: Path) -> str:
    return CONFIG.format(interval=INTERVAL_MS, out=out)


def exported_names(out: Path) -> set[str]:
    return {row["metric_name"] for row in exported_rows(out)}


async def test_readyz_reports_a_log_that_ran_out_of_space_until_restarted_with_room(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out" / "kip714.jsonl"
    with tiny_fs(tmp_path / "data" / "log", 160 * 1024) as log_dir:
        async with running(tmp_path, config(out)) as server:
            status, body = await get(server, "/readyz")
            assert (status, body["ready"], body["reasons"]) == (200, True, [])
            names = [f"enospc.{n}" for n in range(40)]
            acknowledged = await push_names(server, names, points=400, stop_on_refusal=True)
            assert 0 < len(acknowledged) < len(names)  # the disk filled up on the way
            body = await ready_is(server, 503)
            (reason,) = [r for r in body["reasons"] if "ingest log" in r]
            assert "cannot append" in reason
            assert "No space left on device" in reason
            # Liveness stays 200 and carries the details.
            status, health = await get(server, "/healthz")
            assert status == 200
            assert health["ok"] is False
            assert health["log_failed"] is True
            status, metrics = await get(server, "/metrics")
            assert "kip714_ready 0.0" in metrics
        assert "ingest log" in server.failures  # the exit status says so
        with_room = 64 * 1024 * 1024
        resize(log_dir, with_room)
        async with running(tmp_path, config(out)) as restarted:
            await ready_is(restarted, 200)
            assert await push_names(restarted, ["after.restart"]) == ["after.restart"]
            status, metrics = await get(restarted, "/metrics")
            assert "kip714_ready 1.0" in metrics
        assert not restarted.failures
        assert restarted.log is not None
    # Every push acknowledged before the disk filled is exported (at least once).
    assert set(acknowledged) | {"after.restart"} <= exported_names(out)
    with pytest.raises(LogClosedError):  # stop closed it
        await restarted.log.append(context(0), payload(0))


async def test_readyz_reports_a_failing_exporter_once_and_recovers_when_the_disk_has_room(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="telemetry.server.exporter_host")
    with tiny_fs(tmp_path / "outfs", 256 * 1024) as outfs:
        out = outfs / "kip714.jsonl"
        async with running(tmp_path, config(out)) as server:
            assert await push_names(server, ["before.full"]) == ["before.full"]
            await ready_is(server, 200)
            filler = fill(outfs)
            # The log still takes pushes; only the exporter's disk is full.
            acknowledged = await push_names(server, [f"while.full.{n}" for n in range(5)])
            assert len(acknowledged) == 5
            body = await ready_is(server, 503)
            (reason,) = body["reasons"]
            assert reason.startswith("exporter out is failing")
            assert "No space left on device" in reason or "writing" in reason
            failures = [r for r in caplog.records if "exporter out failed" in r.getMessage()]
            assert len(failures) == 1  # logged once when it happened, not per retry
            assert failures[0].levelno == logging.ERROR
            assert failures[0].exc_info is None  # one line; the traceback is at DEBUG
            host = server.hosts[0]
            assert host.stats.failures >= 3
            filler.unlink()
            await ready_is(server, 200)
            assert any("exporter out recovered" in r.getMessage() for r in caplog.records)
            assert {"before.full", *acknowledged} <= exported_names(out)
        assert not server.failures  # failing for a while is not a failure at exit


class _BrokenLanding(InMemoryExporter):
    """A landing whose worker failed: it reports the worker's traceback, as the landings do."""

    def __init__(self, config: Mapping[str, Any] | None = None, /) -> None:
        super().__init__(config)
        try:
            raise ValueError("boom at /srv/secret/worker.py")
        except ValueError:
            self.failure = f"landing stopped: worker failed: {traceback.format_exc()}"


async def test_readyz_answers_a_reason_and_leaves_the_traceback_to_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="telemetry.server.bootstrap")
    registry.register("broken-landing", _BrokenLanding)
    try:
        async with running(tmp_path, '[exporters.broken]\ntype = "broken-landing"\n') as server:
            body = await ready_is(server, 503)
            _, health = await get(server, "/healthz")
    finally:
        registry.unregister("broken-landing")
    (reason,) = body["reasons"]
    assert reason.startswith("exporter broken has failed: landing stopped: worker failed")
    for answered in (reason, *health["reasons"]):
        assert "Traceback" not in answered
        assert "File " not in answered
        assert "/srv/secret" not in answered
        assert "\n" not in answered
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("Traceback (most recent call last)" in m and "/srv/secret" in m for m in logged)
