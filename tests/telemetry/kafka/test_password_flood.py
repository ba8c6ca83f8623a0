"""A PLAIN flood: bounded hashing off the loop, unknown users hashed too, closed checks dropped,
failures answered only after the delay."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

import aiohttp

from telemetry.security.settings import hash_password
from telemetry.wire.admin_apis import AdminApiKey, encode_admin_request
from telemetry.wire.headers import RequestHeader
from telemetry.wire.sasl_messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from tests.telemetry.kafka.test_kafka_security_clients import sasl_frame
from tests.telemetry.kafka.test_kafka_security_listener import login
from tests.telemetry.kafka_wire_client import WireClient
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server


def _config(threads: int, delay_ms: int, iterations: int) -> str:
    bob = hash_password("bob-pw", iterations=iterations).encoded()
    return (
        '[subscriptions.base]\nmetrics = ["*"]\n'
        '[admin]\ntoken = "t0ken"\n'
        f'[security]\nsuper_users = ["User:admin"]\npassword_check_threads = {threads}\n'
        f"failed_authentication_delay_ms = {delay_ms}\n"
        f'[security.plain_users]\nbob = "{bob}"\n'
    )


async def _handshake(server: Server) -> WireClient:
    assert server.listener is not None
    client = await WireClient.connect(*server.listener.bound_address, "t")
    await sasl_frame(client, AdminApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    return client


async def _wrong_password(server: Server, user: str) -> int:
    client = await _handshake(server)
    try:
        _, answer = await sasl_frame(
            client,
            AdminApiKey.SASL_AUTHENTICATE,
            1,
            SaslAuthenticateRequest(auth_bytes=f"\0{user}\0wrong".encode()),
        )
        assert isinstance(answer, SaslAuthenticateResponse)
        assert await client.closed_by_server()
        return answer.error_code
    finally:
        await client.close()


async def _admin_change(server: Server) -> int:
    assert server.http_address is not None
    host, port = server.http_address
    headers = {"Authorization": "Bearer t0ken", "Content-Type": "application/json"}
    body = json.dumps({"set": {"interval.ms": 1000}})
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://{host}:{port}/admin/subscriptions/base", data=body, headers=headers
        ) as response,
    ):
        return response.status


async def test_a_flood_hashes_on_its_own_bounded_pool_known_or_unknown_user(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, _config(threads=2, delay_ms=0, iterations=5000)) as server:
        assert server.password_checks is not None
        stats = server.password_checks.stats
        codes = []
        for batch in range(5):  # 250 attempts, 50 at a time, half of them for unknown users
            users = [f"ghost{batch}-{i}" if i % 2 else "bob" for i in range(50)]
            flood = [asyncio.create_task(_wrong_password(server, user)) for user in users]
            if batch == 2:  # an admin change in the middle of the flood is served
                codes.append(await _admin_change(server))
            codes += await asyncio.gather(*flood)
        completed, peak = stats.completed, stats.peak_running
    assert codes.count(58) == 250
    assert codes.count(200) == 1
    # Every attempt hashed exactly once, unknown users too, and only on the pool's threads.
    assert completed == 250
    assert 1 <= peak <= 2


async def test_a_check_is_dropped_when_its_connection_closes(tmp_path: Path) -> None:
    async with running(tmp_path, _config(threads=1, delay_ms=0, iterations=200_000)) as server:
        assert server.password_checks is not None and server.listener is not None
        clients = [await _handshake(server) for _ in range(30)]
        for client in clients:
            token = SaslAuthenticateRequest(auth_bytes=b"\0bob\0wrong")
            await client.write(client_frame(client, token))
            await client.close()
        deadline = time.monotonic() + 60
        while server.listener.stats.connections_open and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        open_connections = server.listener.stats.connections_open
        completed = server.password_checks.stats.completed
        alive, _ = await login_bob(server)
    assert open_connections == 0
    assert completed < 10  # at most the checks already running when their peers left
    assert alive


async def test_a_failure_is_answered_after_the_delay(tmp_path: Path) -> None:
    async with running(tmp_path, _config(threads=1, delay_ms=600_000, iterations=5000)) as server:
        assert server.listener is not None and server.listener.security is not None
        security = server.listener.security
        failing = await _handshake(server)
        token = SaslAuthenticateRequest(auth_bytes=b"\0ghost\0wrong")
        await failing.write(client_frame(failing, token))
        served, _ = await login_bob(server)  # the pool is free: only the answer waits
        failures_while_delayed = security.failures
        await failing.close()
    async with running(tmp_path, _config(threads=1, delay_ms=100, iterations=5000)) as server:
        code = await _wrong_password(server, "ghost")
    assert served
    assert failures_while_delayed == 0
    assert code == 58


def client_frame(client: WireClient, request: SaslAuthenticateRequest) -> bytes:
    client._correlation_id += 1
    header = RequestHeader(
        api_key=AdminApiKey.SASL_AUTHENTICATE,
        api_version=1,
        correlation_id=client._correlation_id,
        client_id="t",
    )
    return encode_admin_request(header, request)


async def login_bob(server: Server) -> tuple[bool, int]:
    client, lifetime = await login(server, "bob", "bob-pw")
    try:
        return bool(await client.metadata()), lifetime
    finally:
        await client.close()
