"""Hostile input to the Kafka listener: each test ends by proving the server still serves.

A refused frame closes that one connection (``closed_for``: "malformed" for
bytes the codec refuses, "refused" for keys and versions kip714 does not speak,
"truncated" for a peer that left mid-frame); everything else carries on. The
last test throws all of it at once and then serves a real confluent-kafka
producer.
"""

from __future__ import annotations

import asyncio
import random
import struct
from typing import TYPE_CHECKING

import pytest

from telemetry.core.client_uuid import Uuid
from telemetry.errors import ErrorCode
from telemetry.wire import SIZE_PREFIX, ApiKey, ApiVersionsRequest, ApiVersionsResponse
from tests.telemetry.kafka_real_clients import (
    RealClient,
    client_config,
    push_then_close,
)
from tests.telemetry.kafka_wire_client import (
    Server,
    metric_names,
    raw_header,
    running_server,
    serves_telemetry,
    sized,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

MAX_FRAME_BYTES = 64 * 1024
PUSH_HEAD = b"\x00" * 16 + struct.pack(">i?b", 1, False, 0)  # id, subscription, terminating, codec


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with running_server(tmp_path, max_frame_bytes=MAX_FRAME_BYTES) as started:
        yield started


async def send_and_close(server: Server, data: bytes) -> None:
    """Write ``data``, then close our side without waiting for any answer."""
    client = await server.connect()
    await client.write(data)
    await client.close()


async def closed_after(server: Server, data: bytes) -> bool:
    """Write ``data`` and report whether the server then closes the connection."""
    client = await server.connect()
    try:
        await client.write(data)
        return await client.closed_by_server()
    finally:
        await client.close()


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x00",  # half a size prefix
        SIZE_PREFIX.pack(40),  # a prefix and nothing after it
        SIZE_PREFIX.pack(40) + b"\x00\x12\x00\x03",  # closed mid-frame
        SIZE_PREFIX.pack(MAX_FRAME_BYTES) + bytes(1000),  # a size that lies
    ],
    ids=["half-prefix", "prefix-only", "mid-frame", "lying-size"],
)
async def test_peer_leaving_mid_frame(server: Server, data: bytes) -> None:
    await send_and_close(server, data)
    assert await server.wait_idle() == 0
    assert server.listener.stats.closed_for["truncated"] == 1
    assert await serves_telemetry(server)


@pytest.mark.parametrize(
    "size", [-1, -(2**31), MAX_FRAME_BYTES + 1, 2**31 - 1], ids=["-1", "min", "limit+1", "max"]
)
async def test_negative_or_oversized_frame_closes_at_once(server: Server, size: int) -> None:
    # No body follows: the server must close on the prefix alone, never waiting
    # for (or buffering) the bytes it announces.
    assert await closed_after(server, SIZE_PREFIX.pack(size))
    assert await server.wait_idle() == 0
    assert server.listener.stats.closed_for["malformed"] == 1
    assert await serves_telemetry(server)


async def test_random_garbage_bodies_close_their_connection(server: Server) -> None:
    rng = random.Random(714)
    bodies = [rng.randbytes(rng.randint(1, 300)) for _ in range(40)]
    outcomes = await asyncio.gather(*(closed_after(server, sized(body)) for body in bodies))
    assert all(outcomes)
    assert await server.wait_idle() == 0
    stats = server.listener.stats
    assert stats.closed_for["malformed"] + stats.closed_for["refused"] == 40
    assert stats.requests == {}
    assert await serves_telemetry(server)


@pytest.mark.parametrize(
    "frame",
    [
        raw_header(0, 9, 1, tags=True) + b"\x00" * 8,  # Produce
        raw_header(1000, 0, 1, tags=False),  # no such key
        raw_header(-1, 0, 1, tags=False),
        raw_header(3, 13, 1, tags=True) + b"\x01\x00\x00\x00",  # Metadata v13
        raw_header(3, -1, 1, tags=False),
        raw_header(71, 1, 1, tags=True) + bytes(17),  # GetTelemetrySubscriptions v1
        raw_header(72, 1, 1, tags=True) + PUSH_HEAD + b"\x01\x00",  # PushTelemetry v1
    ],
    ids=["produce", "key-1000", "key-minus-1", "metadata-v13", "metadata-v-1", "get-v1", "push-v1"],
)
async def test_unknown_key_or_unsupported_version_closes_the_connection(
    server: Server, frame: bytes
) -> None:
    client = await server.connect()
    _, first = client.frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
    await client.write(first + sized(frame))
    # What came before is answered; the refused frame closes the connection.
    answered, _ = await client.receive(ApiKey.API_VERSIONS, 3, ApiVersionsResponse)
    assert answered == 1
    assert await client.closed_by_server()
    await client.close()
    assert await server.wait_idle() == 0
    assert server.listener.stats.closed_for["refused"] == 1
    assert await serves_telemetry(server)


@pytest.mark.parametrize(
    "frame",
    [
        # client_id claims 32767 bytes, 3 follow
        struct.pack(">hhih", 18, 0, 1, 0x7FFF) + b"abc",
        # client_id claims a negative length other than -1 (null)
        struct.pack(">hhih", 18, 0, 1, -2) + b"abc",
        # ApiVersions v3: ClientSoftwareName (compact) claims 2**31 bytes
        raw_header(18, 3, 1, tags=True) + b"\x80\x80\x80\x80\x08" + b"x" * 10,
        # a varint that never ends
        raw_header(18, 3, 1, tags=True) + b"\xff" * 12,
        # GetTelemetrySubscriptions: tagged fields claiming 2**28 entries
        raw_header(71, 0, 1, tags=True) + bytes(16) + b"\x80\x80\x80\x80\x01",
        # PushTelemetry: Metrics (compact bytes) claims ~2 GiB, 4 bytes follow
        raw_header(72, 0, 1, tags=True) + PUSH_HEAD + b"\xff\xff\xff\xff\x07" + b"\x28\xb5\x2f\xfd",
        # PushTelemetry cut inside its fixed head
        raw_header(72, 0, 1, tags=True) + PUSH_HEAD[:10],
        # a valid GET followed by trailing bytes
        raw_header(71, 0, 1, tags=True) + bytes(17) + b"trailing",
        # a header with nothing after the api key
        b"\x00\x12",
        # an empty frame
        b"",
        # invalid UTF-8 in the client id
        struct.pack(">hhih", 18, 0, 1, 2) + b"\xff\xfe",
    ],
    ids=[
        "client-id-32767",
        "client-id-negative",
        "software-name-2gib",
        "endless-varint",
        "tagged-fields-2e28",
        "metrics-2gib",
        "push-cut",
        "trailing-bytes",
        "header-cut",
        "empty-frame",
        "bad-utf8",
    ],
)
async def test_malformed_frames_close_the_connection(server: Server, frame: bytes) -> None:
    assert await closed_after(server, sized(frame))
    assert await server.wait_idle() == 0
    assert server.listener.stats.closed_for["malformed"] == 1
    assert server.listener.stats.requests == {}
    assert await serves_telemetry(server)


async def test_many_connections_opened_and_dropped(server: Server) -> None:
    async def drop(index: int) -> None:
        client = await server.connect(f"dropper-{index}")
        if index % 4 == 1:
            await client.write(b"\x00")
        elif index % 4 == 2:
            _, frame = client.frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
            await client.write(frame[:-3])
        elif index % 4 == 3:
            await client.api_versions()
        await client.close()

    for batch in range(4):
        await asyncio.gather(*(drop(batch * 50 + n) for n in range(50)))
    assert await server.wait_idle() == 0
    stats = server.listener.stats
    assert stats.connections_accepted == 200
    assert (
        stats.closed_for["eof"] + stats.closed_for["reset"] + stats.closed_for["truncated"] == 200
    )
    assert stats.closed_for["truncated"] >= 100 - stats.closed_for["reset"]
    assert await serves_telemetry(server)


async def test_idle_connection_is_not_disturbed_by_hostile_neighbours(server: Server) -> None:
    """A client connected before the abuse keeps its session (and its instance) throughout."""
    steady = await server.connect("steady")
    subscription = await steady.subscribe()
    await asyncio.gather(
        closed_after(server, SIZE_PREFIX.pack(-5)),
        closed_after(server, sized(raw_header(4242, 0, 1, tags=False))),
        send_and_close(server, SIZE_PREFIX.pack(500) + b"\x00" * 10),
    )
    assert await server.wait_idle(0.5) == 1
    assert (await steady.api_versions()).error_code == ErrorCode.NONE
    instance_id = Uuid.from_bytes(subscription.client_instance_id.bytes)
    assert server.manager.client_instance(instance_id) is not None
    await steady.close()


async def test_everything_at_once_then_a_real_producer(tmp_path: Path) -> None:
    """All the abuse above concurrently, then confluent-kafka pushes as if nothing happened."""
    async with running_server(tmp_path, max_frame_bytes=MAX_FRAME_BYTES) as server:
        rng = random.Random(2024)
        attacks: list[bytes] = [
            b"\x00\x00",
            SIZE_PREFIX.pack(MAX_FRAME_BYTES) + bytes(100),
            SIZE_PREFIX.pack(-1),
            SIZE_PREFIX.pack(MAX_FRAME_BYTES + 1) + bytes(100),
            sized(raw_header(0, 9, 1, tags=True)),
            sized(raw_header(3, 13, 1, tags=True)),
            sized(struct.pack(">hhih", 18, 0, 1, 0x7FFF) + b"abc"),
            *(sized(rng.randbytes(rng.randint(1, 200))) for _ in range(30)),
            *(b"" for _ in range(60)),
        ]
        rng.shuffle(attacks)
        await asyncio.gather(*(send_and_close(server, data) for data in attacks))
        assert await server.wait_idle() == 0
        closed = server.listener.stats.closed_for
        assert sum(closed.values()) == len(attacks)
        assert closed["truncated"] >= 1
        assert server.listener.stats.requests == {}

        producer = await asyncio.to_thread(
            RealClient, "producer", client_config(server.port, "kip714-survivor", log_level=4)
        )
        pushes = await push_then_close(server, producer, regular_pushes=2, timeout_s=10.0)

    assert len(pushes) >= 3
    assert [p.terminating for p in pushes][-1] is True
    assert not any(p.terminating for p in pushes[:-1])
    assert {p.client_software_name for p in pushes} == {"confluent-kafka-python"}
    assert all(
        name.startswith("org.apache.kafka.producer.") for name in metric_names(pushes[0].payload)
    )
    assert server.manager.stats.push_responses[ErrorCode.INVALID_REQUEST] == 0
