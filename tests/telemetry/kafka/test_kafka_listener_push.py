"""Every KIP-714 error code and gating rule, over a real socket to the Kafka listener.

The listener runs on a :class:`ManualClock`, so "too early" and "after the
interval" are exact rather than raced against the wall clock; the interval is
300 ms as a short real subscription would be.
"""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING

import cramjam
import lz4.frame
import pytest

from telemetry.core.codecs import CompressionType
from telemetry.core.settings import TelemetryConfig
from telemetry.errors import ErrorCode
from telemetry.ingest import LogConfig
from tests.telemetry.kafka_wire_client import (
    COMPRESSORS,
    ONE_ID,
    ZERO_ID,
    ManualClock,
    Server,
    metric_names,
    otlp_payload,
    running_server,
    zstd_stream,
)

if TYPE_CHECKING:
    import uuid
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

INTERVAL_MS = 300
MAX_BYTES = 4096
MAX_DECOMPRESSED = 64 * 1024
PAYLOAD = otlp_payload("org.apache.kafka.producer.request.latency.avg", points=20)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    telemetry = TelemetryConfig(max_bytes=MAX_BYTES, max_decompressed_bytes=MAX_DECOMPRESSED)
    async with running_server(tmp_path, telemetry=telemetry, clock=ManualClock()) as started:
        yield started


def advance(server: Server, delta_ms: int = INTERVAL_MS) -> None:
    assert server.clock is not None
    server.clock.advance(delta_ms)


async def test_get_with_zero_id_gets_a_fresh_id_that_is_then_echoed(server: Server) -> None:
    client = await server.connect()
    first = await client.subscribe()
    second = await client.subscribe()
    assert first.client_instance_id not in {ZERO_ID, ONE_ID}
    assert second.client_instance_id not in {ZERO_ID, ONE_ID, first.client_instance_id}
    assert first.accepted_compression_types == (4, 3, 1, 2)
    assert first.push_interval_ms == INTERVAL_MS
    assert first.telemetry_max_bytes == MAX_BYTES
    assert first.delta_temporality is True
    assert first.requested_metrics == ("*",)

    advance(server)
    again = await client.get_subscriptions(first.client_instance_id)
    await client.close()
    assert again.error_code == ErrorCode.NONE
    assert again.client_instance_id == first.client_instance_id
    assert again.subscription_id == first.subscription_id


@pytest.mark.parametrize("reserved", [ZERO_ID, ONE_ID], ids=["zero", "one"])
async def test_push_with_a_reserved_id_is_an_invalid_request(
    server: Server, reserved: uuid.UUID
) -> None:
    client = await server.connect()
    subscription = await client.subscribe()
    pushed = await client.push(reserved, subscription.subscription_id, PAYLOAD)
    await client.close()
    assert (pushed.error_code, pushed.throttle_time_ms) == (ErrorCode.INVALID_REQUEST, 0)
    assert server.manager.instance_count == 1  # no instance for the reserved id
    assert await server.pushes() == []


async def test_push_and_get_within_the_interval_are_throttled(server: Server) -> None:
    client = await server.connect()
    sub = await client.subscribe()
    instance, subscription_id = sub.client_instance_id, sub.subscription_id
    # The first push right after a GET passes (the client's jitter may be < 1).
    assert (await client.push(instance, subscription_id, PAYLOAD)).error_code == ErrorCode.NONE
    early = await client.push(instance, subscription_id, PAYLOAD)
    assert (early.error_code, early.throttle_time_ms) == (ErrorCode.THROTTLING_QUOTA_EXCEEDED, 0)
    early_get = await client.get_subscriptions(instance)
    assert early_get.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    advance(server, INTERVAL_MS - 1)
    assert (await client.push(instance, subscription_id, PAYLOAD)).error_code == 89
    advance(server, 1)
    assert (await client.push(instance, subscription_id, PAYLOAD)).error_code == ErrorCode.NONE
    await client.close()
    assert len(await server.pushes()) == 2
    assert server.manager.stats.throttled == 3


async def test_unknown_subscription_id_then_get_is_exempt_from_the_gate(server: Server) -> None:
    client = await server.connect()
    sub = await client.subscribe()
    wrong = await client.push(sub.client_instance_id, sub.subscription_id ^ 1, PAYLOAD)
    assert wrong.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    # The client re-GETs at once; the interval gate lets it through.
    reget = await client.get_subscriptions(sub.client_instance_id)
    assert reget.error_code == ErrorCode.NONE
    assert (reget.client_instance_id, reget.subscription_id) == (
        sub.client_instance_id,
        sub.subscription_id,
    )
    # The exemption is for one GET after the error, not a free pass.
    assert (await client.get_subscriptions(sub.client_instance_id)).error_code == 89
    advance(server)
    ok = await client.push(sub.client_instance_id, sub.subscription_id, PAYLOAD)
    await client.close()
    assert ok.error_code == ErrorCode.NONE
    assert server.manager.stats.unknown_subscription == 1


async def test_unsupported_compression_type_then_get_is_exempt(server: Server) -> None:
    client = await server.connect()
    sub = await client.subscribe()
    pushed = await client.push(sub.client_instance_id, sub.subscription_id, PAYLOAD, 7)
    assert pushed.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    reget = await client.get_subscriptions(sub.client_instance_id)
    await client.close()
    assert reget.error_code == ErrorCode.NONE
    assert await server.pushes() == []


async def test_payload_over_telemetry_max_bytes_is_too_large(server: Server) -> None:
    client = await server.connect()
    sub = await client.subscribe()
    too_big = await client.push(sub.client_instance_id, sub.subscription_id, b"\x0a" * 4097)
    assert too_big.error_code == ErrorCode.TELEMETRY_TOO_LARGE
    # Exactly max_bytes is fine (a new instance: the refused push used the slot).
    other = await client.subscribe()
    exact = await client.push(other.client_instance_id, other.subscription_id, b"\x0a" * 4096)
    await client.close()
    assert exact.error_code == ErrorCode.NONE
    assert [len(p.payload) for p in await server.pushes()] == [4096]


ZEROS = bytes(256 * 1024)


@pytest.mark.parametrize(
    ("compression", "compress"),
    [
        (CompressionType.ZSTD, zstd_stream),
        (CompressionType.GZIP, gzip.compress),
        (CompressionType.LZ4, lz4.frame.compress),
    ],
    ids=["zstd", "gzip", "lz4"],
)
async def test_decompression_bomb_is_too_large(
    server: Server, compression: CompressionType, compress: Callable[[bytes], bytes]
) -> None:
    bomb = compress(ZEROS)
    assert len(bomb) <= MAX_BYTES  # small on the wire, 256 KiB > 64 KiB once inflated
    client = await server.connect()
    sub = await client.subscribe()
    pushed = await client.push(sub.client_instance_id, sub.subscription_id, bomb, compression)
    await client.close()
    assert pushed.error_code == ErrorCode.TELEMETRY_TOO_LARGE
    assert await server.pushes() == []


GOOD_ZSTD = zstd_stream(PAYLOAD)
GOOD_GZIP = gzip.compress(PAYLOAD)
GOOD_LZ4 = lz4.frame.compress(PAYLOAD)
GOOD_SNAPPY = bytes(cramjam.snappy.compress_raw(PAYLOAD))


@pytest.mark.parametrize(
    ("compression", "data"),
    [
        (CompressionType.ZSTD, b"\x28\xb5\x2f\xfd" + b"\xff" * 40),
        (CompressionType.ZSTD, GOOD_ZSTD[: len(GOOD_ZSTD) // 2]),
        (CompressionType.ZSTD, b"not zstd at all"),
        (CompressionType.GZIP, GOOD_GZIP[:10] + b"\xff" * 30),
        (CompressionType.GZIP, GOOD_GZIP[: len(GOOD_GZIP) // 2]),
        (CompressionType.LZ4, GOOD_LZ4[:7] + b"\xff" * 30),
        (CompressionType.LZ4, GOOD_LZ4[: len(GOOD_LZ4) // 2]),
        (CompressionType.SNAPPY, b"\x0a" + b"\xff" * 10),
        (CompressionType.SNAPPY, GOOD_SNAPPY[: len(GOOD_SNAPPY) // 2]),
        (CompressionType.SNAPPY, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x7f\xff\xff\xff"),
    ],
    ids=[
        "zstd-garbage-frame",
        "zstd-truncated",
        "zstd-bad-magic",
        "gzip-garbage",
        "gzip-truncated",
        "lz4-garbage",
        "lz4-truncated",
        "snappy-garbage",
        "snappy-truncated",
        "xerial-lying-length",
    ],
)
async def test_corrupt_compressed_bytes_are_an_invalid_record(
    server: Server, compression: CompressionType, data: bytes
) -> None:
    client = await server.connect()
    sub = await client.subscribe()
    pushed = await client.push(sub.client_instance_id, sub.subscription_id, data, compression)
    await client.close()
    assert pushed.error_code == ErrorCode.INVALID_RECORD
    assert await server.pushes() == []


async def test_terminating_push_is_accepted_once(server: Server) -> None:
    client = await server.connect()
    sub = await client.subscribe()
    instance, subscription_id = sub.client_instance_id, sub.subscription_id
    assert (await client.push(instance, subscription_id, PAYLOAD)).error_code == ErrorCode.NONE
    # A terminating push bypasses the interval gate...
    last = await client.push(instance, subscription_id, PAYLOAD, terminating=True)
    assert last.error_code == ErrorCode.NONE
    # ...and is the last one: anything after it is an invalid request.
    advance(server)
    after = await client.push(instance, subscription_id, PAYLOAD)
    again = await client.push(instance, subscription_id, PAYLOAD, terminating=True)
    await client.close()
    assert after.error_code == again.error_code == ErrorCode.INVALID_REQUEST
    assert [p.terminating for p in await server.pushes()] == [False, True]


@pytest.mark.parametrize("codec", sorted(COMPRESSORS))
async def test_every_codec_is_logged_as_sent_and_read_back_decompressed(
    server: Server, codec: str
) -> None:
    compression, compress = COMPRESSORS[codec]
    payload = otlp_payload(f"org.apache.kafka.producer.{codec}", points=30)
    data = compress(payload)
    assert len(data) <= MAX_BYTES
    client = await server.connect(f"codec-{codec}")
    sub = await client.subscribe()
    pushed = await client.push(sub.client_instance_id, sub.subscription_id, data, compression)
    await client.close()

    assert pushed.error_code == ErrorCode.NONE
    # On disk: the bytes as the client sent them, not the decompressed payload.
    segments = b"".join(p.read_bytes() for p in sorted(server.log.directory.glob("*.log")))
    assert data in segments
    if codec not in {"none", "gzip-level0"}:
        assert payload not in segments
        assert len(segments) < len(payload)
    [logged] = await server.pushes()
    assert logged.payload == payload
    assert metric_names(logged.payload) == [f"org.apache.kafka.producer.{codec}"] * 30
    assert logged.client_id == f"codec-{codec}"
    assert logged.subscription_id == sub.subscription_id
    assert logged.push_interval_ms == INTERVAL_MS
    assert logged.content_type == "OTLP"
    assert logged.terminating is False


@pytest.mark.parametrize(
    ("metrics", "compression"),
    [(None, CompressionType.NONE), (b"", CompressionType.NONE), (b"", CompressionType.ZSTD)],
    ids=["null", "empty", "empty-zstd"],
)
async def test_null_and_empty_metrics_are_accepted_and_not_logged(
    server: Server, metrics: bytes | None, compression: CompressionType
) -> None:
    client = await server.connect()
    sub = await client.subscribe()
    pushed = await client.push(sub.client_instance_id, sub.subscription_id, metrics, compression)
    # Still a real push: it consumed the slot.
    early = await client.push(sub.client_instance_id, sub.subscription_id, PAYLOAD)
    await client.close()
    assert pushed.error_code == ErrorCode.NONE
    assert early.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert await server.pushes() == []
    assert server.manager.stats.push_responses[ErrorCode.NONE] == 1


async def test_full_log_throttles_pushes(tmp_path: Path) -> None:
    log_config = LogConfig(segment_bytes=4096, max_bytes=8192, full_throttle_ms=120)
    clock = ManualClock()
    async with running_server(tmp_path, log_config=log_config, clock=clock) as server:
        # An exporter that registered and never commits holds back retention.
        await server.log.register("stuck-exporter")
        client = await server.connect()
        sub = await client.subscribe()
        payload = otlp_payload("org.apache.kafka.producer.filler", points=25)
        assert 1000 < len(payload) < 2000
        codes: list[tuple[int, int]] = []
        for _ in range(12):  # the budget holds about five of these
            pushed = await client.push(sub.client_instance_id, sub.subscription_id, payload)
            codes.append((pushed.error_code, pushed.throttle_time_ms))
            clock.advance(INTERVAL_MS)
            if pushed.error_code != ErrorCode.NONE:
                break
        # The channel was muted for the throttle time, then serves again.
        after = await client.get_subscriptions(sub.client_instance_id)
        await client.close()
        logged = await server.pushes()
        assert server.log.stats.refused_full >= 1

    *accepted, (refused, throttle_ms) = codes
    assert accepted and all(c == (ErrorCode.NONE, 0) for c in accepted)
    assert (refused, throttle_ms) == (ErrorCode.THROTTLING_QUOTA_EXCEEDED, 120)
    assert len(logged) == len(accepted)
    assert after.error_code == ErrorCode.NONE


async def test_record_too_large_for_the_log_is_too_large(tmp_path: Path) -> None:
    log_config = LogConfig(segment_bytes=64 * 1024, max_bytes=1024 * 1024, max_record_bytes=1024)
    async with running_server(tmp_path, log_config=log_config) as server:
        client = await server.connect()
        sub = await client.subscribe()
        pushed = await client.push(sub.client_instance_id, sub.subscription_id, PAYLOAD)
        await client.close()
        assert await server.pushes() == []
    assert len(PAYLOAD) > 1024
    assert pushed.error_code == ErrorCode.TELEMETRY_TOO_LARGE


async def test_subscription_change_takes_effect_on_the_next_request(server: Server) -> None:
    client = await server.connect("foo-1")
    old = await client.subscribe()
    instance = old.client_instance_id
    assert (await client.push(instance, old.subscription_id, PAYLOAD)).error_code == 0

    server.manager.update_subscription(
        "foo-producers",
        {"metrics": "org.apache.kafka.producer.", "interval.ms": "200", "match": "client_id=foo.*"},
    )
    server.manager.update_subscription("all", {})  # removed
    advance(server)
    stale = await client.push(instance, old.subscription_id, PAYLOAD)
    assert stale.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    new = await client.get_subscriptions(instance)
    assert new.error_code == ErrorCode.NONE
    assert new.client_instance_id == instance
    assert new.subscription_id != old.subscription_id
    assert (new.requested_metrics, new.push_interval_ms) == (("org.apache.kafka.producer.",), 200)
    advance(server, 200)
    assert (await client.push(instance, old.subscription_id, PAYLOAD)).error_code == 117
    advance(server, 200)
    assert (await client.push(instance, new.subscription_id, PAYLOAD)).error_code == 0

    # A client the match does not select gets no metrics and the 5-minute default.
    other = await server.connect("bar-1")
    unmatched = await other.subscribe()
    await other.close()
    await client.close()
    assert (unmatched.requested_metrics, unmatched.push_interval_ms) == ((), 300_000)
    assert [p.subscription_id for p in await server.pushes()] == [
        old.subscription_id,
        new.subscription_id,
    ]


@pytest.mark.parametrize(
    ("early", "subscription_delta", "compression", "size", "expected"),
    [
        (True, 1, 7, MAX_BYTES + 1, ErrorCode.THROTTLING_QUOTA_EXCEEDED),
        (False, 1, 7, MAX_BYTES + 1, ErrorCode.UNKNOWN_SUBSCRIPTION_ID),
        (False, 0, 7, MAX_BYTES + 1, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
        (False, 0, CompressionType.NONE, MAX_BYTES + 1, ErrorCode.TELEMETRY_TOO_LARGE),
    ],
    ids=["gate-first", "then-subscription", "then-compression", "then-size"],
)
async def test_the_first_failing_push_check_wins(
    server: Server,
    early: bool,
    subscription_delta: int,
    compression: int,
    size: int,
    expected: ErrorCode,
) -> None:
    client = await server.connect()
    sub = await client.subscribe()
    if early:  # use the slot, so the next push is too early
        assert (
            await client.push(sub.client_instance_id, sub.subscription_id, PAYLOAD)
        ).error_code == 0
    pushed = await client.push(
        sub.client_instance_id,
        sub.subscription_id + subscription_delta,
        b"\x0a" * size,
        compression,
    )
    await client.close()
    assert pushed.error_code == expected


async def test_a_refused_terminating_push_does_not_lock_the_instance(server: Server) -> None:
    """Unlike Kafka (KAFKA-20898), only an accepted terminating push ends the instance."""
    client = await server.connect()
    sub = await client.subscribe()
    instance = sub.client_instance_id
    refused = await client.push(instance, sub.subscription_id ^ 1, PAYLOAD, terminating=True)
    assert refused.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    advance(server)
    regular = await client.push(instance, sub.subscription_id, PAYLOAD)
    last = await client.push(instance, sub.subscription_id, PAYLOAD, terminating=True)
    await client.close()
    assert (regular.error_code, last.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    assert [p.terminating for p in await server.pushes()] == [False, True]


async def test_get_with_the_one_id_is_answered_but_pushes_are_refused(server: Server) -> None:
    """Kafka checks reserved ids only on push."""
    client = await server.connect()
    answer = await client.get_subscriptions(ONE_ID)
    pushed = await client.push(ONE_ID, answer.subscription_id, PAYLOAD)
    await client.close()
    assert (answer.error_code, answer.client_instance_id) == (ErrorCode.NONE, ONE_ID)
    assert pushed.error_code == ErrorCode.INVALID_REQUEST


async def test_a_push_of_a_megabyte_is_read_whole(tmp_path: Path) -> None:
    """Frames far above the stream reader's 64 KiB buffer limit arrive intact."""
    payload = otlp_payload("org.apache.kafka.producer.big", points=12_000)
    assert 512 * 1024 < len(payload) <= 1024 * 1024
    async with running_server(tmp_path, max_frame_bytes=2 * 1024 * 1024) as server:
        client = await server.connect()
        sub = await client.subscribe()
        raw = await client.push(sub.client_instance_id, sub.subscription_id, payload)
        other = await client.subscribe()
        zstd = await client.push(
            other.client_instance_id, other.subscription_id, zstd_stream(payload), 4
        )
        await client.close()
        logged = await server.pushes()
    assert (raw.error_code, zstd.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    assert [p.payload == payload for p in logged] == [True, True]
