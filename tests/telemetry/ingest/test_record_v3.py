"""Format version 3: the broker a push was forwarded through, and version 2 still read."""

from __future__ import annotations

import dataclasses
import struct
from typing import TYPE_CHECKING

import crc32c
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from telemetry.core.codecs import CompressionType
from telemetry.ingest import IngestLog, PushContext
from telemetry.ingest.record import (
    BROKER_ID_ATTRIBUTE,
    BROKER_LISTENER_ATTRIBUTE,
    with_broker_attributes,
)
from tests.exporters.support import payload as otlp_with
from tests.telemetry.ingest.support import context, decoded_frame, encoded_frame
from tests.telemetry.kafka_wire_client import otlp_payload, zstd_stream

if TYPE_CHECKING:
    from pathlib import Path

OTLP = otlp_payload("org.apache.kafka.producer.record.send.rate", points=40)


def _v2_frame(offset: int, ctx: PushContext, stored: bytes, codec: int, size: int) -> bytes:
    """A version 2 frame, encoded here by the format's documentation, not by the code."""
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
        "<BBqqqqiBI7I",
        2,
        flags,
        offset,
        ctx.subscription_id,
        ctx.received_time_ms,
        ctx.push_interval_ms,
        ctx.client_source_port or 0,
        codec,
        size,
        *(0xFFFFFFFF if e is None else len(e) for e in encoded),
    )
    body += b"".join(e for e in encoded if e) + stored
    return struct.pack("<II", len(body), crc32c.crc32c(body)) + body


def resource_attributes(data: bytes) -> list[dict[str, object]]:
    """Each resource's attributes, the last of repeated keys winning (as the landing keeps them)."""
    out = []
    for resource in MetricsData.FromString(data).resource_metrics:
        attributes: dict[str, object] = {}
        for kv in resource.resource.attributes:
            kind = kv.value.WhichOneof("value")
            attributes[kv.key] = getattr(kv.value, kind) if kind else None
        out.append(attributes)
    return out


def test_version_2_frames_still_decode_without_a_broker() -> None:
    sent = zstd_stream(OTLP)
    record = decoded_frame(_v2_frame(7, context(7), sent, CompressionType.ZSTD, len(OTLP)), 7)
    assert record.payload == OTLP
    assert record.client_id == context(7).client_id
    assert (record.broker_id, record.broker_listener) == (None, None)


def test_a_forwarded_push_keeps_its_payload_as_sent_and_reads_with_the_brokers_attributes() -> None:
    ctx = dataclasses.replace(context(3), broker_id=5, broker_listener="INTERNAL")
    sent = zstd_stream(OTLP)
    frame = encoded_frame(3, ctx, sent, CompressionType.ZSTD, len(OTLP))
    assert sent in frame
    assert len(frame) < len(OTLP)  # stored compressed, not re-encoded
    record = decoded_frame(frame, 3)
    assert (record.broker_id, record.broker_listener) == (5, "INTERNAL")
    assert resource_attributes(record.payload) == [
        {BROKER_ID_ATTRIBUTE: 5, BROKER_LISTENER_ATTRIBUTE: "INTERNAL"}
    ]
    # Only the resources changed: the metrics are the client's.
    original = MetricsData.FromString(OTLP).resource_metrics[0].scope_metrics
    assert MetricsData.FromString(record.payload).resource_metrics[0].scope_metrics == original


def test_the_brokers_attributes_win_over_any_the_client_claims() -> None:
    claimed = otlp_with(resource={BROKER_ID_ATTRIBUTE: "99", "service.name": "orders"})
    attributes = resource_attributes(with_broker_attributes(claimed, 5, None))
    assert attributes == [{BROKER_ID_ATTRIBUTE: 5, "service.name": "orders"}]
    assert with_broker_attributes(b"\x8a\xff not protobuf", 5, "X") == b"\x8a\xff not protobuf"
    assert with_broker_attributes(claimed, None, None) == claimed


async def test_a_version_2_log_on_disk_stays_readable_and_takes_version_3_appends(
    tmp_path: Path,
) -> None:
    sent = zstd_stream(OTLP)
    (tmp_path / "00000000000000000000.log").write_bytes(
        b"".join(
            _v2_frame(seq, context(seq), sent, CompressionType.ZSTD, len(OTLP)) for seq in range(3)
        )
    )
    log = await IngestLog.open(tmp_path)
    assert (log.log_end, log.stats.recovery_truncated_bytes) == (3, 0)
    ctx = dataclasses.replace(context(3), broker_id=1, broker_listener=None)
    assert await log.append(ctx, sent, CompressionType.ZSTD, len(OTLP)) == 3
    await log.close()
    log = await IngestLog.open(tmp_path)
    records = log.read(0)
    await log.close()
    assert [r.payload for r in records[:3]] == [OTLP] * 3
    assert [r.broker_id for r in records] == [None, None, None, 1]
    assert resource_attributes(records[3].payload) == [{BROKER_ID_ATTRIBUTE: 1}]
