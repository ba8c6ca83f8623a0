"""Helpers shared by the ingest-log tests: deterministic pushes and small logs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from telemetry.ingest import IngestLog, LogConfig, PushContext
from telemetry.ingest.record import HEADER, decode_body, encode_frame

if TYPE_CHECKING:
    from pathlib import Path

    from exporters.api import LoggedPush

INSTANCE_ID = "Vm2qkwYbRUCMcOiPSuDS0A"
# Small segments so a few dozen records roll several times.
SMALL = LogConfig(segment_bytes=2048, max_bytes=1 << 20, max_record_bytes=1 << 19)


def context(seq: int, *, terminating: bool = False) -> PushContext:
    """A push context whose every field is derived from ``seq``."""
    return PushContext(
        client_instance_id=INSTANCE_ID,
        subscription_id=-1_234_567 + seq,
        received_time_ms=1_700_000_000_000 + seq,
        push_interval_ms=5000,
        terminating=terminating,
        client_id=f"producer-{seq}",
        client_software_name="confluent-kafka-python",
        client_software_version="2.6.0",
        client_source_address="10.0.0.7",
        client_source_port=40000 + seq % 20000,
        principal="User:alice" if seq % 2 else None,
    )


def payload(seq: int, size: int = 300) -> bytes:
    """``size`` bytes that identify ``seq``, so a swapped or damaged payload shows."""
    unit = seq.to_bytes(8, "big")
    return (unit * (size // 8 + 1))[:size]


def encoded_frame(
    offset: int, ctx: PushContext, stored: bytes, codec: int = 0, size: int = -1
) -> bytes:
    """A whole frame as the log writes it (``encode_frame``'s head, then the payload)."""
    head, length = encode_frame(offset, ctx, stored, codec, size)
    frame = head + stored
    assert len(frame) == length
    return frame


def decoded_frame(frame: bytes, expected_offset: int) -> LoggedPush:
    """The record a whole frame holds, checked as a reader checks it."""
    length, crc = HEADER.unpack_from(frame)
    return decode_body(frame, HEADER.size, HEADER.size + length, crc, expected_offset)


def assert_matches(record: LoggedPush, seq: int, size: int = 300) -> None:
    expected = context(seq)
    assert record.client_id == expected.client_id
    assert record.subscription_id == expected.subscription_id
    assert record.received_time_ms == expected.received_time_ms
    assert record.client_source_port == expected.client_source_port
    assert record.principal == expected.principal
    assert record.payload == payload(seq, size)


async def append_many(log: IngestLog, seqs: range, size: int = 300) -> list[int]:
    return [await log.append(context(s), payload(s, size)) for s in seqs]


def segment_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.log"))
