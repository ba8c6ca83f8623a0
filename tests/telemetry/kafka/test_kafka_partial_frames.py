"""Frames that do not complete, oversized frames before SASL, and failed SASL attempts' log lines.

Issue 35, items 3 (b, c) and 16, over real sockets: a frame must complete
within ``partial_frame_timeout_ms`` of its first byte; with SASL required, a
frame before authentication may declare at most 512 KiB, while without SASL
(or once authenticated) a 1 MiB push is served; a flood of failed SASL
attempts writes one log line per address and minute.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from telemetry.enforcement import Enforcement, LimitSettings
from telemetry.errors import ErrorCode
from telemetry.wire import SIZE_PREFIX
from telemetry.wire.admin_apis import AdminApiKey
from telemetry.wire.sasl_messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from tests.telemetry.kafka.test_kafka_security_clients import sasl_frame
from tests.telemetry.kafka.test_kafka_security_listener import login
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload, running_server
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from telemetry.server.bootstrap import Server

KIB = 1024
MIB = 1024 * KIB

SECURED = """
[security]
super_users = ["User:admin"]
failed_authentication_delay_ms = 0
[security.plain_users]
admin = "admin-pw"
bob = "bob-pw"
"""


async def served(client: WireClient) -> bool:
    try:
        return (await client.api_versions()).error_code == ErrorCode.NONE
    except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
        return False


def big_payload() -> bytes:
    """A real OTLP payload between 512 KiB and 1 MiB (``telemetry.max_bytes``)."""
    payload = otlp_payload("big", points=14_000)
    assert 512 * KIB < len(payload) <= MIB, len(payload)
    return payload


async def test_a_frame_not_complete_within_the_timeout_closes_its_connection(
    tmp_path: Path,
) -> None:
    enforcer = Enforcement(limits=LimitSettings(partial_frame_timeout_ms=300))
    async with running_server(tmp_path, enforcement=enforcer) as server:
        quiet = await server.connect()
        assert await served(quiet)
        stalled = await server.connect()
        await stalled.write(SIZE_PREFIX.pack(1000) + b"\x00" * 500)  # half a frame, then nothing
        assert await stalled.closed_by_server()
        await stalled.close()
        # Only the stalled frame timed out: a connection between frames is not idle-closed
        # (connections_max_idle_ms is 10 minutes) and is still served.
        assert await served(quiet)
        await quiet.close()
        assert await server.wait_idle() == 0
        assert enforcer.request_memory.held == 0
    assert server.listener.stats.closed_for["partial_frame_timeout_ms"] == 1
    assert enforcer.refusals.counts[("kafka", "partial_frame_timeout_ms")] == 1
    assert not server.listener.partial_frames


async def test_a_first_request_of_1_mib_is_served_without_sasl(tmp_path: Path) -> None:
    """No pre-authentication cap without SASL: a 1 MiB push is legitimate there."""
    async with running_server(tmp_path, max_frame_bytes=2 * MIB) as server:
        payload = big_payload()
        first = await server.connect()
        # The very first request on the connection, an unknown instance: answered, not closed.
        answer = await first.push(uuid.uuid4(), 1, payload)
        assert answer.error_code != ErrorCode.NONE
        await first.close()
        client = await server.connect()
        subscription = await client.subscribe()
        pushed = await client.push(
            subscription.client_instance_id, subscription.subscription_id, payload
        )
        assert pushed.error_code == ErrorCode.NONE
        await client.close()
    assert not server.listener.enforcement.refusals.counts


async def test_a_frame_over_512_kib_before_sasl_closes_the_connection(tmp_path: Path) -> None:
    async with running(tmp_path, SECURED) as server:
        assert server.listener is not None
        listener = server.listener
        host, port = listener.bound_address
        attacker = await WireClient.connect(host, port, "t")
        assert await served(attacker)  # ApiVersions, before authentication
        await attacker.write(SIZE_PREFIX.pack(512 * KIB + 1) + b"\x00" * 100)
        assert await attacker.closed_by_server()
        await attacker.close()
        refusals = listener.enforcement.refusals.counts
        assert refusals[("kafka", "sasl_server_max_receive_size")] == 1
        # Once authenticated, the listener's own frame limit applies: a 1 MiB push is served.
        client, _ = await login(server, "bob", "bob-pw")
        try:
            subscription = await client.subscribe()
            pushed = await client.push(
                subscription.client_instance_id, subscription.subscription_id, big_payload()
            )
            assert pushed.error_code == ErrorCode.NONE
        finally:
            await client.close()
        assert listener.stats.closed_for["sasl_server_max_receive_size"] == 1


async def failed_login(server: Server) -> None:
    assert server.listener is not None
    client = await WireClient.connect(*server.listener.bound_address, "t")
    try:
        await sasl_frame(
            client, AdminApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")
        )
        _, answer = await sasl_frame(
            client,
            AdminApiKey.SASL_AUTHENTICATE,
            1,
            SaslAuthenticateRequest(auth_bytes=b"\0bob\0wrong"),
        )
        assert isinstance(answer, SaslAuthenticateResponse)
        assert answer.error_code == 58
        assert await client.closed_by_server()
    finally:
        await client.close()


async def test_failed_sasl_attempts_are_logged_once_per_address_and_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    attempts = 10
    caplog.set_level(logging.INFO)
    async with running(tmp_path, SECURED) as server:
        assert server.listener is not None and server.listener.security is not None
        for _ in range(attempts):
            await failed_login(server)
        client, _ = await login(server, "bob", "bob-pw")  # still served
        await client.close()
        assert server.listener.security.failures == attempts  # each counted (/metrics)
    lines = [r.name for r in caplog.records if "SASL authentication failed" in r.getMessage()]
    # The failure and the close it causes: one line each, not one per attempt.
    assert sorted(lines) == ["telemetry.kafka.authenticator", "telemetry.kafka.connection"]
