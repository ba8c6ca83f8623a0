"""Format version 2: payloads stored as sent, decompressed on read, and version 1 still read."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
from typing import TYPE_CHECKING

import crc32c
import pytest

from telemetry.core.codecs import CompressionType
from telemetry.ingest import IngestLog, LogCorruptionError, PushContext, RecordTooLargeError
from telemetry.ingest.inspection import inspect_log
from telemetry.ingest.record import HEADER, MAX_BODY, FrameError, encode_frame
from tests.telemetry.ingest.support import (
    SMALL,
    assert_matches,
    context,
    decoded_frame,
    encoded_frame,
    payload,
    segment_files,
)
from tests.telemetry.kafka_wire_client import COMPRESSORS, otlp_payload

if TYPE_CHECKING:
    from pathlib import Path


OTLP = otlp_payload("org.apache.kafka.producer.record.send.rate", points=40)


def _v1_frame(offset: int, ctx: PushContext, body_payload: bytes) -> bytes:
    """A version 1 frame, encoded here by the format's documentation, not by the code."""
    strings = [
        ctx.client_instance_id,
        ctx.content_type,
        ctx.client_id,
        ctx.client_software_name,
        ctx.client_software_version,
        ctx.client_source_address,
        ctx.principal,
    ]
    encoded = [None if s is None else s.encode() for s in strings]
    flags = (1 if ctx.terminating else 0) | (2 if ctx.client_source_port is not None else 0)
    body = struct.pack(
        "<BBqqqqi7I",
        1,
        flags,
        offset,
        ctx.subscription_id,
        ctx.received_time_ms,
        ctx.push_interval_ms,
        ctx.client_source_port or 0,
        *(0xFFFFFFFF if e is None else len(e) for e in encoded),
    )
    body += b"".join(e for e in encoded if e) + body_payload
    return struct.pack("<II", len(body), crc32c.crc32c(body)) + body


@pytest.mark.parametrize("codec", sorted(COMPRESSORS))
def test_every_codec_round_trips_stored_as_sent(codec: str) -> None:
    compression, compress = COMPRESSORS[codec]
    sent = compress(OTLP)
    frame = encoded_frame(9, context(9), sent, compression, len(OTLP))
    assert sent in frame
    if codec not in {"none", "gzip-level0"}:
        assert len(frame) < len(OTLP)  # the decompressed payload is not on disk
    record = decoded_frame(frame, 9)
    assert record.payload == OTLP
    assert record.client_id == context(9).client_id
    assert record.offset == 9


def test_uncompressed_payloads_need_no_size() -> None:
    assert decoded_frame(encoded_frame(1, context(1), payload(1)), 1).payload == payload(1)
    with pytest.raises(ValueError, match="decompressed size"):
        encode_frame(0, context(0), gzip.compress(OTLP), CompressionType.GZIP)
    with pytest.raises(ValueError, match="uncompressed payload of"):
        encode_frame(0, context(0), OTLP, CompressionType.NONE, len(OTLP) + 1)
    with pytest.raises(ValueError, match="unknown compression"):
        encode_frame(0, context(0), OTLP, 5, len(OTLP))


def test_version_1_frames_still_decode() -> None:
    ctx = context(4, terminating=True)
    record = decoded_frame(_v1_frame(4, ctx, payload(4)), 4)
    assert_matches(record, 4)
    assert record.terminating
    assert record.content_type == "OTLP"


async def test_a_version_1_log_on_disk_stays_readable_and_takes_version_2_appends(
    tmp_path: Path,
) -> None:
    # A segment as the previous release wrote it: records 0..4, version 1.
    (tmp_path / "00000000000000000000.log").write_bytes(
        b"".join(_v1_frame(seq, context(seq), payload(seq)) for seq in range(5))
    )
    log = await IngestLog.open(tmp_path)
    assert (log.log_start, log.log_end, log.stats.recovery_truncated_bytes) == (0, 5, 0)
    sent = gzip.compress(OTLP)
    assert await log.append(context(5), sent, CompressionType.GZIP, len(OTLP)) == 5
    records = log.read(0)
    await log.close()
    for seq in range(5):
        assert_matches(records[seq], seq)
    assert records[5].payload == OTLP
    # Sizes as sent and decompressed (issue 42's push_bytes): unknown as sent in version 1.
    assert (records[5].received_bytes, records[5].decoded_bytes) == (len(sent), len(OTLP))
    assert (records[0].received_bytes, records[0].decoded_bytes) == (None, len(payload(0)))
    # One segment of both versions: whole after a reopen, no damage for inspection.
    log = await IngestLog.open(tmp_path)
    assert log.log_end == 6
    assert [r.payload for r in log.read(4)] == [payload(4), OTLP]
    await log.close()
    inspection = inspect_log(
        tmp_path, payload_ok=lambda data: data in {OTLP, *map(payload, range(5))}
    )
    assert (inspection.damage, inspection.undecodable) == ([], 0)
    assert segment_files(tmp_path) == ["00000000000000000000.log"]


@pytest.mark.parametrize(
    ("codec", "stored"),
    [
        (CompressionType.ZSTD, b"\x28\xb5\x2f\xfd" + b"\xff" * 40),
        (CompressionType.GZIP, gzip.compress(OTLP)[:30]),
        (CompressionType.LZ4, b"\x04\x22\x4d\x18" + b"\xff" * 20),
        (CompressionType.SNAPPY, b"\x0a" + b"\xff" * 10),
    ],
    ids=["zstd", "gzip", "lz4", "snappy"],
)
def test_a_corrupt_payload_under_a_valid_crc_is_a_frame_error(
    codec: CompressionType, stored: bytes
) -> None:
    frame = encoded_frame(2, context(2), stored, codec, len(OTLP))
    with pytest.raises(FrameError, match=f"{codec.name} payload does not decompress") as error:
        decoded_frame(frame, 2)
    assert error.value.position == 0


def _with_body(frame: bytes, at: int, value: bytes) -> bytes:
    """``frame`` with body bytes from ``at`` on replaced and its CRC recomputed."""
    body = bytearray(frame[HEADER.size :])
    body[at : at + len(value)] = value
    return struct.pack("<II", len(body), crc32c.crc32c(bytes(body))) + bytes(body)


def test_a_payload_that_decompresses_to_another_size_is_a_frame_error() -> None:
    sent = gzip.compress(OTLP)
    with pytest.raises(FrameError, match=f"decompressed to {len(OTLP)} bytes"):
        decoded_frame(encoded_frame(0, context(0), sent, CompressionType.GZIP, len(OTLP) + 1), 0)
    with pytest.raises(FrameError, match="does not decompress"):  # longer than declared
        decoded_frame(encoded_frame(0, context(0), sent, CompressionType.GZIP, len(OTLP) - 1), 0)
    uncompressed = encoded_frame(0, context(0), OTLP, CompressionType.NONE, len(OTLP))
    size_at = 39  # the body's decompressed_size field
    with pytest.raises(FrameError, match="decompressed to"):
        decoded_frame(_with_body(uncompressed, size_at, struct.pack("<I", len(OTLP) + 1)), 0)


def test_an_unknown_codec_or_an_impossible_size_is_a_frame_error() -> None:
    frame = encoded_frame(0, context(0), OTLP)
    with pytest.raises(FrameError, match="unknown compression type 9"):
        decoded_frame(_with_body(frame, 38, b"\x09"), 0)
    huge = _with_body(frame, 38, bytes([CompressionType.ZSTD]) + struct.pack("<I", MAX_BODY + 1))
    with pytest.raises(FrameError, match="over"):
        decoded_frame(huge, 0)


@pytest.mark.parametrize(
    ("codec", "bomb"),
    [
        (CompressionType.GZIP, gzip.compress(bytes(64 << 20))),
        (CompressionType.ZSTD, COMPRESSORS["zstd"][1](bytes(64 << 20))),
        (CompressionType.LZ4, COMPRESSORS["lz4"][1](bytes(64 << 20))),
        (CompressionType.SNAPPY, COMPRESSORS["snappy-raw"][1](bytes(64 << 20))),
    ],
    ids=["gzip", "zstd", "lz4", "snappy"],
)
def test_a_decompression_bomb_record_is_refused_in_bounded_memory(
    codec: CompressionType, bomb: bytes
) -> None:
    # 64 MiB of zeros in a record that declares 1,000 bytes (its CRC is valid).
    frame = encoded_frame(0, context(0), bomb, codec, 1000)
    tracemalloc.start()
    try:
        with pytest.raises(FrameError, match="does not decompress"):
            decoded_frame(frame, 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The stored bytes (copied once out of the frame), not the 64 MiB they expand to.
    assert peak < len(bomb) + (1 << 20)


async def test_a_corrupt_payload_stops_readers_and_inspection_without_a_crash(
    tmp_path: Path,
) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await log.append(context(0), payload(0))
    # The log trusts its caller's check; a payload that does not decompress is damage on read.
    await log.append(context(1), b"\x28\xb5\x2f\xfd" + b"\xff" * 40, CompressionType.ZSTD, 500)
    assert [r.offset for r in log.read(0, max_records=1)] == [0]
    with pytest.raises(LogCorruptionError, match="ZSTD payload does not decompress") as error:
        log.read(0)
    assert error.value.offset == 1
    assert log.stats.corrupt_reads == 1
    await log.close()
    [damage] = inspect_log(tmp_path, payload_ok=lambda _: True).damage
    assert (damage.offset, damage.next_readable_offset) == (1, None)


async def test_the_record_limit_and_the_read_budget_count_decompressed_bytes(
    tmp_path: Path,
) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    big = bytes(SMALL.max_record_bytes)
    with pytest.raises(RecordTooLargeError):
        await log.append(context(0), gzip.compress(big), CompressionType.GZIP, len(big))
    sent = gzip.compress(OTLP)
    for seq in range(3):
        await log.append(context(seq), sent, CompressionType.GZIP, len(OTLP))
    assert log.retained_bytes < len(OTLP)  # three records on disk, smaller than one decompressed
    # A read budget of two decompressed payloads returns two records, not all three.
    assert [r.offset for r in log.read(0, max_bytes=2 * len(OTLP) + 400)] == [0, 1]
    assert [r.payload for r in log.read(0)] == [OTLP] * 3
    await log.close()
