"""The forward route draws from the shared request-memory pool (design invariant 9)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import aiohttp
import pytest
from aiohttp import web

from telemetry.http.forward import FORWARD_PATH, ForwardHandler
from telemetry.http.forward_codec import CONTENT_TYPE
from telemetry.http.memory import HttpRequestMemory
from telemetry.http.routes import RUNNER_OPTIONS
from telemetry.server.bootstrap import Server
from tests.telemetry.http.test_http_forward import (
    TOKEN,
    encode_push,
    encode_request,
    forward_server,  # noqa: F401  # the fixture "server", parametrized below
    post,
    post_answer,
)
from tests.telemetry.kafka_wire_client import otlp_payload, zstd_stream

if TYPE_CHECKING:
    from telemetry.enforcement import RequestMemoryPool


#: The route's settings, served by test_http_forward's ``server`` fixture: a short memory wait.
pytestmark = pytest.mark.parametrize(
    "server",
    [f'[forward]\ntoken = "{TOKEN}"\n[http]\nmemory_wait_ms = 100\n'],
    indirect=True,
    ids=["memory_wait_ms=100"],
)


def pool_of(server: Server) -> RequestMemoryPool:
    assert server.enforcement is not None
    return server.enforcement.request_memory


async def test_a_full_pool_answers_503_with_retry_after_and_logs_nothing(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    pool = pool_of(server)
    assert server.log is not None and pool.held == 0
    body = encode_request(1, [encode_push(zstd_stream(otlp_payload("m")))])
    other = pool.bound  # another request holds the whole pool
    pool.change(other)
    with caplog.at_level(logging.INFO):
        status, headers, answer = await post_answer(server, body)
    assert status == 503
    assert headers["Retry-After"] == "1"  # memory_wait_ms 100, rounded up to a second
    assert "queued_max_request_bytes" in answer["error"]
    assert not [r for r in caplog.records if r.name.startswith("telemetry")]
    assert server.log.log_end == 0
    assert pool.held == other  # the refused request holds nothing

    pool.change(-other)
    assert (await post(server, body)) == (200, {"error_codes": [0], "throttle_time_ms": 0})
    assert pool.held == 0


async def test_decompressed_payloads_draw_from_the_pool_before_anything_is_logged(
    server: Server,
) -> None:
    """What a 3.7 broker forwards expands: each payload is decoded holding memory, one at a time.

    The decoded copy is given back once the payload is checked: it is logged as sent.
    """
    pool = pool_of(server)
    assert server.log is not None
    body = encode_request(2, [encode_push(zstd_stream(otlp_payload(f"m{i}"))) for i in range(2)])
    # Another request holds all but the body: with the body held the pool is
    # full, so the first payload waits memory_wait_ms in vain to be decoded.
    other = pool.bound - len(body)
    pool.change(other)
    status, answer = await post(server, body)
    assert status == 503, answer
    assert server.log.log_end == 0  # nothing of a refused request is logged
    assert pool.held == other

    pool.change(-other)
    status, answer = await post(server, body)
    assert (status, answer) == (200, {"error_codes": [0, 0], "throttle_time_ms": 0})
    assert server.log.log_end == 2
    assert pool.held == 0


async def test_a_request_cancelled_while_waiting_for_memory_gives_back_what_it_held(
    server: Server,
) -> None:
    """A client gone mid-request (aiohttp cancels its handler): body and decoded bytes return."""
    assert server.log is not None
    pool = pool_of(server)
    memory = HttpRequestMemory(pool, wait_ms=60_000)
    handler = ForwardHandler(
        server.log,
        server.settings.forward,
        server.settings.telemetry.max_decompressed_bytes,
        authorizer=server.authorizer,
        memory=memory,
    )
    app = web.Application()
    app.router.add_post(FORWARD_PATH, handler.handle)
    runner = web.AppRunner(app, **RUNNER_OPTIONS, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        body = encode_request(
            2, [encode_push(zstd_stream(otlp_payload(f"m{i}"))) for i in range(2)]
        )
        other = pool.bound - len(body)
        pool.change(other)
        async with aiohttp.ClientSession() as session:
            sending = asyncio.ensure_future(
                session.post(
                    f"http://{host}:{port}{FORWARD_PATH}",
                    data=body,
                    headers={"Content-Type": CONTENT_TYPE, "Authorization": f"Bearer {TOKEN}"},
                )
            )
            # Bounded: the body held, the first payload waiting for memory to be decoded.
            for _ in range(500):
                if pool.held >= other + len(body) and memory._waiters:
                    break
                await asyncio.sleep(0.01)
            assert pool.held == other + len(body)
            assert memory._waiters
            sending.cancel()  # the client goes away
            with pytest.raises(asyncio.CancelledError):
                await sending
        for _ in range(500):
            if pool.held == other:
                break
            await asyncio.sleep(0.01)
        assert pool.held == other
        assert server.log.log_end == 0
        pool.change(-other)
        assert pool.held == 0
    finally:
        await runner.cleanup()
