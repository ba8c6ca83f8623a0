"""What hostile pushes cost the server, over a real socket: memory, decompressions, the loop.

Each test sends what a reviewer acting as a hostile client sent, checks the
protocol's answer, and then checks the cost: the allocation peak
(tracemalloc: Python's allocator serves the codecs' output buffers), the
number of decompressions, or which thread did the expensive work. Wall
time is never asserted; ``benchmarks/heavy_push_bench.py`` measures it.
"""

from __future__ import annotations

import gzip
import threading
import tracemalloc
from typing import TYPE_CHECKING

import pytest

from telemetry.core.codecs import CompressionType
from telemetry.core.settings import TelemetryConfig
from telemetry.errors import ErrorCode
from telemetry.ingress import INLINE_DECOMPRESSED_BYTES
from telemetry.wire import ApiKey, ApiVersionsRequest, ApiVersionsResponse, PushTelemetryRequest
from telemetry.wire import PushTelemetryResponse as WirePushResponse
from tests.telemetry.kafka_wire_client import (
    ManualClock,
    Server,
    otlp_payload,
    running_server,
    serves_telemetry,
    zstd_declaring,
    zstd_stream,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

MiB = 1024 * 1024
GiB = 1024 * MiB
BOUND = 16 * MiB  # the default max_decompressed_bytes


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    telemetry = TelemetryConfig(max_bytes=MiB, max_decompressed_bytes=BOUND)
    async with running_server(
        tmp_path, telemetry=telemetry, clock=ManualClock(), max_frame_bytes=2 * MiB
    ) as started:
        yield started


async def test_zstd_frame_declaring_a_gib_is_refused_without_allocating_it(server: Server) -> None:
    frame = zstd_declaring(GiB, GiB)  # honest: it really expands to a GiB
    assert len(frame) < 40 * 1024
    client = await server.connect()
    sub = await client.subscribe()
    tracemalloc.start()
    try:
        pushed = await client.push(sub.client_instance_id, sub.subscription_id, frame, 4)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    await client.close()
    assert pushed.error_code == ErrorCode.TELEMETRY_TOO_LARGE  # not 89: nothing stalled
    assert peak < 8 * MiB  # the GiB (or even the 16 MiB bound) never materialised
    assert await serves_telemetry(server)


async def test_a_flood_of_failing_terminating_pushes_costs_one_decompression(
    server: Server,
) -> None:
    """50 terminating 17 KB gzip bombs in one interval: one is decompressed, 49 are 89."""
    bomb = gzip.compress(bytes(BOUND + MiB), compresslevel=9)
    assert len(bomb) < 20 * 1024
    client = await server.connect()
    sub = await client.subscribe()
    frames = b""
    for _ in range(50):
        _, frame = client.frame(
            ApiKey.PUSH_TELEMETRY,
            0,
            PushTelemetryRequest(
                client_instance_id=sub.client_instance_id,
                subscription_id=sub.subscription_id,
                terminating=True,
                compression_type=int(CompressionType.GZIP),
                metrics=bomb,
            ),
        )
        frames += frame
    await client.write(frames)  # pipelined, as fast as the socket takes them
    codes = []
    for _ in range(50):
        _, answer = await client.receive(ApiKey.PUSH_TELEMETRY, 0, WirePushResponse)
        codes.append(answer.error_code)
    await client.close()
    assert codes == [ErrorCode.TELEMETRY_TOO_LARGE] + 49 * [ErrorCode.THROTTLING_QUOTA_EXCEEDED]
    assert server.manager.stats.decompressions == 1
    assert await serves_telemetry(server)


def decompression_threads() -> set[int]:
    """The listener's decompression pool threads alive now (the pool starts them on demand)."""
    return {
        thread.ident
        for thread in threading.enumerate()
        if thread.name.startswith("kip714-decompress") and thread.ident is not None
    }


async def test_large_decompression_leaves_the_loop_and_answers_stay_in_order(
    server: Server,
) -> None:
    small = otlp_payload("org.apache.kafka.producer.small", points=5)
    large = otlp_payload("org.apache.kafka.producer.large", points=4000) * 40  # ~5 MiB of OTLP
    assert INLINE_DECOMPRESSED_BYTES < len(large) <= BOUND
    heavy = await server.connect("heavy")
    first = await heavy.subscribe()
    other = await heavy.subscribe()
    # Pipelined on one connection: the deferred push, then two quick requests.
    requests = [
        (ApiKey.PUSH_TELEMETRY, first, zstd_stream(large)),
        (ApiKey.API_VERSIONS, None, b""),
        (ApiKey.PUSH_TELEMETRY, other, zstd_stream(small)),
    ]
    sent = b""
    expected = []
    for api_key, sub, data in requests:
        if sub is None:
            correlation, frame = heavy.frame(api_key, 3, ApiVersionsRequest())
        else:
            correlation, frame = heavy.frame(
                api_key,
                0,
                PushTelemetryRequest(
                    client_instance_id=sub.client_instance_id,
                    subscription_id=sub.subscription_id,
                    terminating=False,
                    compression_type=int(CompressionType.ZSTD),
                    metrics=data,
                ),
            )
        sent += frame
        expected.append(correlation)
    threads_before = decompression_threads()
    await heavy.write(sent)
    pushed_large = await heavy.receive(ApiKey.PUSH_TELEMETRY, 0, WirePushResponse)
    versions = await heavy.receive(ApiKey.API_VERSIONS, 3, ApiVersionsResponse)
    pushed_small = await heavy.receive(ApiKey.PUSH_TELEMETRY, 0, WirePushResponse)
    await heavy.close()
    assert [pushed_large[0], versions[0], pushed_small[0]] == expected
    assert [pushed_large[1].error_code, versions[1].error_code, pushed_small[1].error_code] == [
        0,
        0,
        0,
    ]
    logged = await server.pushes()
    assert [p.payload for p in logged] == [large, small]
    # The large one went to the pool (an inline attempt stopped at the inline
    # limit, then the whole bound in a thread: it was logged whole); the
    # small one stayed on the loop. The manager's own code is compiled, so
    # the pool's threads and its counters are what shows where it ran.
    assert server.manager.stats.decompressions == 2
    assert server.manager.stats.deferred_decompressions == 1
    assert decompression_threads() - threads_before


async def test_deferred_refusals_keep_kafkas_error_codes(server: Server) -> None:
    """Too large after decompressing in a thread is still 118, corrupt still 87."""
    bomb = gzip.compress(bytes(BOUND + 1), compresslevel=9)
    # A gzip member whose CRC32 trailer is wrong: found only after all of it
    # was inflated, in the thread.
    damaged = bytearray(gzip.compress(otlp_payload("org.apache.kafka.producer.x", points=4000)))
    damaged[-8] ^= 0xFF
    corrupt = bytes(damaged)
    client = await server.connect()
    codes = []
    for codec, data in ((CompressionType.GZIP, bomb), (CompressionType.GZIP, corrupt)):
        sub = await client.subscribe()
        answer = await client.push(sub.client_instance_id, sub.subscription_id, data, codec)
        codes.append(answer.error_code)
    await client.close()
    assert codes == [ErrorCode.TELEMETRY_TOO_LARGE, ErrorCode.INVALID_RECORD]
    # Each was tried inline up to the inline limit, then finished in a thread.
    assert server.manager.stats.deferred_decompressions == 2
    assert decompression_threads()
    assert await serves_telemetry(server)
