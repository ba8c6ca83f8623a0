"""Connection limits, idle closes and the request memory pool, over real sockets.

Connection-quota time is the listener's :class:`ManualClock`, so the rates and
throttles are exact; delays and closes happen on the event loop's clock and
are checked with monotonic lower bounds only.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import TYPE_CHECKING

import pytest
import uvloop

from telemetry.enforcement import (
    Enforcement,
    IpQuotaSettings,
    LimitSettings,
    QuotaSettings,
    ThrottleReason,
)
from telemetry.errors import ErrorCode
from telemetry.wire import (
    SIZE_PREFIX,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    RequestHeader,
    encode_request,
)
from tests.telemetry.kafka_wire_client import (
    IO_TIMEOUT_S,
    LOOPBACK,
    ManualClock,
    WireClient,
    running_server,
    serves_telemetry,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from pathlib import Path

KIB = 1024


#: The event loop schedules a mute or a delay on its own clock, in whole
#: milliseconds, so it can end a tick before ``time.monotonic`` says it should.
TIMER_SLACK_S = 0.05


def limits(**values: int) -> Enforcement:
    return Enforcement(limits=LimitSettings(**values))


async def served(client: WireClient) -> bool:
    try:
        return (await client.api_versions()).error_code == ErrorCode.NONE
    except (ConnectionError, asyncio.IncompleteReadError):
        return False


async def test_connections_per_ip_over_the_limit_are_closed_at_once(tmp_path: Path) -> None:
    enforcer = limits(max_connections_per_ip=2)
    async with running_server(tmp_path, clock=ManualClock(), enforcement=enforcer) as server:
        first, second = await server.connect(), await server.connect()
        third = await server.connect()
        assert await third.closed_by_server()
        await third.close()
        assert await served(first)
        assert await served(second)
        await first.close()
        await wait_until(lambda: enforcer.connections.quotas.get(LOOPBACK) == 1)
        # The closed connection gave its slot back (Kafka's dec).
        fourth = await server.connect()
        assert await served(fourth)
        await second.close()
        await fourth.close()
        assert await server.wait_idle() == 0
        assert enforcer.connections.quotas.get(LOOPBACK) == 0
    assert server.listener.stats.closed_for["max_connections_per_ip"] == 1
    assert enforcer.tracker.counts[ThrottleReason.MAX_CONNECTIONS_PER_IP] == 1


async def test_connections_over_max_connections_are_closed_at_once(tmp_path: Path) -> None:
    enforcer = limits(max_connections=2)
    async with running_server(tmp_path, clock=ManualClock(), enforcement=enforcer) as server:
        first, second = await server.connect(), await server.connect()
        third = await server.connect()
        assert await third.closed_by_server()
        await third.close()
        assert await served(first)
        assert await served(second)
        await first.close()
        await second.close()
        assert await server.wait_idle() == 0
        assert enforcer.connections.quotas.total_count == 0
    assert server.listener.stats.closed_for["max_connections"] == 1


async def test_ip_creation_rate_closes_the_connection_after_the_throttle(tmp_path: Path) -> None:
    # 1 connection/s over 11 x 1 s: 10 fit the padded 10 s window, the 11th is
    # 1.1/s: X = 0.1 * 10 s, bounded to one window (1000 ms), then closed.
    quotas = QuotaSettings(ips=(IpQuotaSettings(ip=LOOPBACK, connection_creation_rate=1),))
    enforcer = Enforcement(quotas)
    async with running_server(tmp_path, clock=ManualClock(), enforcement=enforcer) as server:
        clients = [await server.connect() for _ in range(10)]
        assert all([await served(client) for client in clients])
        connected_at = time.monotonic()
        throttled = await server.connect()
        request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
        await throttled.write(throttled.frame(ApiKey.API_VERSIONS, 3, request)[1])
        assert await throttled.closed_by_server()
        closed_after_s = time.monotonic() - connected_at
        await throttled.close()
        for client in clients:
            await client.close()
    assert closed_after_s >= 1.0 - TIMER_SLACK_S
    assert server.listener.stats.requests["ApiVersions"] == 10  # the throttled one was not served
    assert server.listener.stats.closed_for["connection_creation_rate"] == 1
    assert enforcer.tracker.counts[ThrottleReason.CONNECTION_CREATION_RATE] == 1
    assert enforcer.connections.quotas.get(LOOPBACK) == 0


async def test_broker_creation_rate_delays_the_acceptor(tmp_path: Path) -> None:
    enforcer = limits(max_connection_creation_rate=1)
    async with running_server(tmp_path, clock=ManualClock(), enforcement=enforcer) as server:
        clients = [await server.connect() for _ in range(10)]
        assert all([await served(client) for client in clients])
        connected_at = time.monotonic()
        delayed = await server.connect()
        assert await served(delayed)  # served, not refused ...
        served_after_s = time.monotonic() - connected_at  # ... once the acceptor waited
        for client in [*clients, delayed]:
            await client.close()
    assert served_after_s >= 1.0 - TIMER_SLACK_S
    assert enforcer.tracker.counts[ThrottleReason.MAX_CONNECTION_CREATION_RATE] == 1


async def test_idle_connections_are_closed_also_when_stalled_mid_frame(tmp_path: Path) -> None:
    enforcer = limits(connections_max_idle_ms=300)
    async with running_server(tmp_path, enforcement=enforcer) as server:
        quiet = await server.connect()
        assert await served(quiet)
        stalled = await server.connect()
        await stalled.write(SIZE_PREFIX.pack(1000) + b"\x00" * 500)  # half a frame, then nothing
        assert await quiet.closed_by_server()
        assert await stalled.closed_by_server()
        await quiet.close()
        await stalled.close()
        assert await server.wait_idle() == 0
        assert enforcer.request_memory.held == 0
        assert await serves_telemetry(server)
    assert server.listener.stats.closed_for["idle"] >= 2
    assert enforcer.tracker.counts[ThrottleReason.CONNECTIONS_MAX_IDLE_MS] >= 2


async def test_stalled_partial_frames_hold_at_most_the_memory_bound(tmp_path: Path) -> None:
    """Peers send most of a big frame and stall: the bytes held stay bounded; idle closes them.

    Each peer has a request answered first (ApiVersions): unanswered ones would be
    held by the unauthenticated share (test_serve_unauthenticated_limits.py).
    """
    bound = 256 * KIB
    frame_bytes = 64 * KIB
    peers = 40  # 40 x 60 KiB = 2.4 MiB offered, almost ten times the bound
    enforcer = limits(queued_max_request_bytes=bound, connections_max_idle_ms=1500)
    request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    header = RequestHeader(
        api_key=ApiKey.API_VERSIONS, api_version=3, correlation_id=1, client_id="t"
    )
    first = encode_request(header, request)
    async with running_server(
        tmp_path, max_frame_bytes=frame_bytes, enforcement=enforcer
    ) as server:
        # From another thread, each peer connecting and sending at once: later
        # peers arrive while the pool is already full.
        data = first + SIZE_PREFIX.pack(frame_bytes) + b"\x01" * (60 * KIB)
        stalled = await asyncio.to_thread(stall_peers, server.port, peers, data)
        try:
            await wait_until(lambda: enforcer.request_memory.exhausted)
            await asyncio.sleep(0.2)
            pool = enforcer.request_memory
            held_while_stalled = pool.held
            # Frames count as received; every reader is paused at once and offered
            # one byte at a time, but one in the middle of a frame (the finisher),
            # so the bound is passed by at most the read that crossed it, the rest
            # of the finisher's frame and a byte per paused peer.
            assert bound <= pool.peak <= bound + len(data) + frame_bytes + peers
            assert pool.waiting > 0
            assert await server.wait_idle() == 0  # every stalled peer closed for idleness
        finally:
            for peer in stalled:
                peer.close()
        assert (pool.held, pool.waiting) == (0, 0)
        assert await serves_telemetry(server)
    assert bound <= held_while_stalled <= bound + len(data) + frame_bytes + peers
    assert server.listener.stats.closed_for["idle"] == peers


def stall_peers(port: int, count: int, data: bytes) -> list[socket.socket]:
    peers = []
    for _ in range(count):
        peer = socket.create_connection((LOOPBACK, port), timeout=IO_TIMEOUT_S)
        peer.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            peer.send(data)
        peers.append(peer)
    return peers


async def test_a_full_pool_resumes_readers_as_frames_are_handled(tmp_path: Path) -> None:
    """Pipelined requests worth many times the bound are all answered, in order."""
    bound = 64 * KIB
    enforcer = limits(queued_max_request_bytes=bound)
    async with running_server(tmp_path, max_frame_bytes=32 * KIB, enforcement=enforcer) as server:
        clients = [await server.connect() for _ in range(16)]
        # A request answered first: unanswered connections hold only their share.
        assert all([await served(client) for client in clients])
        # 16 clients x 20 requests x ~16 KiB = 5 MiB, 80 times the bound.
        answered = await asyncio.gather(*(pipelined_api_versions(c, 20) for c in clients))
        for client in clients:
            await client.close()
        pool = enforcer.request_memory
        # Whether the pool fills depends on how reads and handling interleave (measured
        # here: 0 or 1 pauses on either loop, run to run); what must hold is the bound
        # and that every request is answered. The pause itself is exercised
        # deterministically by test_stalled_partial_frames_hold_at_most_the_memory_bound.
        assert pool.peak <= bound + 256 * KIB
    assert answered == [20] * 16


async def pipelined_api_versions(client: WireClient, count: int) -> int:
    request = ApiVersionsRequest(client_software_name="a" * 16_000, client_software_version="1")
    frames = [client.frame(ApiKey.API_VERSIONS, 3, request) for _ in range(count)]
    await client.write(b"".join(frame for _, frame in frames))
    answered = 0
    for correlation_id, _ in frames:
        got, response = await client.receive(ApiKey.API_VERSIONS, 3, ApiVersionsResponse)
        assert got == correlation_id
        answered += response.error_code == ErrorCode.NONE
    return answered


async def wait_until(predicate: Callable[[], bool], timeout_s: float = IO_TIMEOUT_S) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


class _TickFailsOnce(Enforcement):
    def __init__(self, limit_settings: LimitSettings) -> None:
        super().__init__(limits=limit_settings)
        self.failures = 0

    def tick(self, now_ms: int) -> None:
        if not self.failures:
            self.failures += 1
            raise RuntimeError("tick failed")
        super().tick(now_ms)


async def test_a_failing_sweep_is_logged_and_the_sweep_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    enforcer = _TickFailsOnce(LimitSettings(connections_max_idle_ms=300))
    async with running_server(tmp_path, enforcement=enforcer) as server:
        quiet = await server.connect()
        assert await served(quiet)
        # Closed by a sweep that runs after the one that failed.
        assert await quiet.closed_by_server()
        await quiet.close()
    assert enforcer.failures == 1
    assert any(
        "sweep failed" in record.getMessage() and record.exc_info for record in caplog.records
    )


@pytest.mark.parametrize(
    "scenario",
    [
        test_ip_creation_rate_closes_the_connection_after_the_throttle,
        test_broker_creation_rate_delays_the_acceptor,
        test_stalled_partial_frames_hold_at_most_the_memory_bound,
        test_a_full_pool_resumes_readers_as_frames_are_handled,
    ],
)
def test_on_uvloop(tmp_path: Path, scenario: Callable[[Path], Coroutine[None, None, None]]) -> None:
    """``kip714 serve`` runs on uvloop, which reads after ``connection_made`` even if paused."""
    uvloop.run(scenario(tmp_path))
