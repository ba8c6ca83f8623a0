"""``Server.stop`` finishes on every path: idle and stuck clients, raising or cancelled steps."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import TYPE_CHECKING

import pytest

from telemetry.ingest import LogClosedError
from telemetry.wire import ApiKey, ApiVersionsRequest
from tests.telemetry.ingest.support import context, payload
from tests.telemetry.kafka_wire_client import WireClient
from tests.telemetry.server_support import INTERVAL_MS, push_names, running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = {interval}
[exporters.landing]  # only the exporters under test
enabled = false
[exporters.a]
type = "jsonl"
[exporters.a.options]
path = "{out}/a.jsonl"
[exporters.b]
type = "jsonl"
[exporters.b.options]
path = "{out}/b.jsonl"
"""


def config(tmp_path: Path) -> str:
    return CONFIG.format(interval=INTERVAL_MS, out=tmp_path / "out")


async def assert_log_closed(server: Server) -> None:
    assert server.log is not None
    with pytest.raises(LogClosedError):
        await server.log.append(context(0), payload(0))


def test_the_tests_run_on_the_standard_asyncio_loop() -> None:
    # uvloop's Server.wait_closed never waited for connections; the standard loop's
    # does from Python 3.12 on. These tests must exercise the standard one.
    async def loop_type() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert asyncio.run(loop_type()).startswith("asyncio")


async def test_stop_with_a_connected_idle_client_on_the_standard_asyncio_loop_finishes(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, config(tmp_path)) as server:
        assert server.listener is not None
        idle = await WireClient.connect(*server.listener.bound_address, client_id="idle")
        await idle.api_versions()
        await asyncio.wait_for(server.stop(), 30)
        assert await idle.closed_by_server()
        await idle.close()
        assert server.listener.stats.connections_open == 0
        assert server.listener.stats.closed_for["shutdown"] == 1
        await assert_log_closed(server)


async def test_stop_with_a_client_that_stopped_reading_finishes(tmp_path: Path) -> None:
    async with running(tmp_path, config(tmp_path)) as server:
        assert server.listener is not None
        client = await WireClient.connect(*server.listener.bound_address, client_id="stuck")
        sock = client.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        _, frame = client.frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
        for _ in range(40):  # thousands of answers it never reads
            await client.write(frame * 500)
        await asyncio.wait_for(server.stop(), 60)
        assert server.listener.stats.connections_open == 0
        client.writer.transport.abort()
        await assert_log_closed(server)


async def test_stop_carries_on_when_one_exporter_stop_raises_or_is_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(tmp_path, config(tmp_path)) as server:
        acknowledged = await push_names(server, [f"p{n}" for n in range(3)])
        assert len(acknowledged) == 3
        first, second = server.hosts

        async def cancelled_stop(drain_timeout_s: float | None = None) -> None:
            raise asyncio.CancelledError

        monkeypatch.setattr(first, "stop", cancelled_stop)
        await asyncio.wait_for(server.stop(), 60)  # a step's own CancelledError stops nothing
        assert server.log is not None
        assert second.committed == server.log.log_end == 3
        await assert_log_closed(server)
        monkeypatch.undo()
        await first.stop()  # release what the skipped stop held (its task, its file)


@pytest.mark.parametrize("moment", ["first step", "exporter drain"])
async def test_a_cancelled_stop_still_drains_every_exporter_and_closes_the_log(
    tmp_path: Path, moment: str
) -> None:
    async with running(tmp_path, config(tmp_path)) as server:
        await push_names(server, [f"p{n}" for n in range(3)])
        stopping = asyncio.create_task(server.stop())
        await asyncio.sleep(0)  # stop() runs up to its first await
        if moment == "exporter drain":
            for _ in range(100_000):
                if server.hosts[0]._stopping.is_set():
                    break
                await asyncio.sleep(0)
        assert not stopping.done()
        stopping.cancel()  # a second signal, a supervisor's timeout
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(stopping, 60)
        assert server.log is not None
        first, second = server.hosts
        # A drain cut short by the cancellation commits only what was exported (the
        # rest waits in the log); the exporters stopped after it still drain fully.
        assert first.committed <= server.log.log_end == 3
        assert set(range(first.committed)) <= exported_offsets(tmp_path / "out" / "a.jsonl")
        assert second.committed == 3
        assert exported_offsets(tmp_path / "out" / "b.jsonl") == {0, 1, 2}
        await assert_log_closed(server)


def exported_offsets(path: Path) -> set[int]:
    return {json.loads(line)["push_offset"] for line in path.read_text().splitlines() if line}


async def test_stop_is_not_held_by_an_http_client_that_never_sends_its_refused_body(
    tmp_path: Path,
) -> None:
    """A 413 answered before the body is read must not keep a stopping server for long.

    aiohttp reads the rest of such a body after the answer (lingering close) for
    10 s by default; kip714 serves with one second, so ``stop`` ends well
    within the bound below.
    """
    async with running(tmp_path, config(tmp_path)) as server:
        assert server.http_address is not None
        reader, writer = await asyncio.open_connection(*server.http_address)
        writer.write(
            b"POST /v1/metrics HTTP/1.1\r\nHost: kip714\r\n"
            b"Content-Type: application/x-protobuf\r\n"
            b"Content-Length: 104857600\r\n\r\n" + bytes(1024)
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        await asyncio.wait_for(server.stop(), 5)
        writer.close()
    assert status_line.startswith(b"HTTP/1.1 413")


async def test_a_slow_stop_step_is_named_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A supervisor that kills a slow stop must be able to see which step it waited on."""
    async with running(tmp_path, config(tmp_path)) as server:
        first = server.hosts[0]
        real_stop = first.stop

        async def slow_stop(drain_timeout_s: float | None = None) -> None:
            await asyncio.sleep(2.5)
            await real_stop(drain_timeout_s)

        monkeypatch.setattr(first, "stop", slow_stop)
        with caplog.at_level("WARNING", logger="telemetry.server.bootstrap"):
            await asyncio.wait_for(server.stop(), 60)
        named = f"stopping: exporter {first.name} took "
        assert [r for r in caplog.records if r.getMessage().startswith(named)]
        await assert_log_closed(server)
