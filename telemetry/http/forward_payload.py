"""A forwarded push's payload checked as the forward route promises: OTLP, logged as sent.

The route takes decompressed OTLP ``MetricsData`` whatever the broker, yet a
Kafka 3.7 broker hands its telemetry plugins each push as the client
compressed it (``PushTelemetryRequest.decompressMetricsData`` there returns
its input; Kafka 3.8 decompresses). The plugin API gives no codec id, so the
codec is recognised by its frame's magic and the payload is decompressed
here, with the same bounded codecs as a direct push, to learn its decoded
size and check it.

It is logged as the broker sent it, compressed when it came compressed,
with its codec and decoded size, as the Kafka listener logs a push: a
1.3 KB zstd push that decodes to 14 MiB costs the log 1.3 KB, not 14 MiB,
and is never re-encoded. The broker's context is not written into the
payload either: it goes in the record's context (``PushContext.broker_id``,
``broker_listener``), and the log's reader adds it to every resource
(``telemetry.ingest.record.with_broker_attributes``). The decoded size is
what the decoded-byte bounds charge (``push_decoded_byte_rate``, ``[log]
max_pending_decoded_bytes``).

The check is the wire format's top level (every field well-formed, every
``resource_metrics`` length-delimited), not a parse: a parse of a payload
that decodes to millions of data points held the GIL for seconds, and the
Kafka listener does not parse its pushes either; a payload whose metrics do
not decode is skipped and counted by the landing
(``kip714_landing_undecodable``). A payload that fails even that is refused
for that push alone with INVALID_RECORD (the plugin counts it rejected).

Why here and not in the plugin: these codecs are bounded by
``telemetry.max_decompressed_bytes`` and tested against what real clients
send, while the broker's decompression API changed between 3.7 and 3.8
(KIP-390).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from telemetry.core.codecs import CompressionType, compression_by_magic, decompress
from telemetry.errors import ErrorCode, InvalidRecordError, TelemetryTooLargeError
from telemetry.ingest.record import BROKER_ID_ATTRIBUTE, BROKER_LISTENER_ATTRIBUTE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client.core import Metric

__all__ = [
    "BROKER_ID_ATTRIBUTE",
    "BROKER_LISTENER_ATTRIBUTE",
    "ForwardCollector",
    "ForwardStats",
    "ForwardedPayload",
    "forwarded_otlp",
]


@dataclass(slots=True)
class ForwardStats:
    """Per-push answers of the forward route and the payloads it had to decompress."""

    answers: Counter[ErrorCode] = field(default_factory=Counter)
    decompressed: Counter[CompressionType] = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class ForwardedPayload:
    """A forwarded payload as the log takes it: as sent, its codec id and decoded size."""

    payload: bytes
    compression: int
    decoded_size: int


def forwarded_otlp(
    payload: bytes,
    max_bytes: int,
    *,
    stats: ForwardStats | None = None,
    share_gil: bool = False,
) -> ForwardedPayload:
    """How to log one forwarded push: the payload as sent, its codec, its decoded size.

    Raises:
        TelemetryTooLargeError: decompressed, the payload exceeds ``max_bytes``.
        InvalidRecordError: the payload is neither OTLP nor a compressed OTLP frame.
    """
    codec = compression_by_magic(payload)
    if codec is not None:
        try:
            decoded = decompress(codec, payload, max_bytes, share_gil=share_gil)
        except InvalidRecordError:
            codec = None  # not that codec after all: OTLP or nothing, decided below
        else:
            if not _well_formed(decoded):
                raise InvalidRecordError("the forwarded payload is not OTLP MetricsData")
            return _counted(ForwardedPayload(payload, int(codec), len(decoded)), codec, stats)
    if _well_formed(payload):
        if len(payload) > max_bytes:
            raise TelemetryTooLargeError(
                f"forwarded payload of {len(payload)} bytes exceeds {max_bytes}"
            )
        return ForwardedPayload(payload, int(CompressionType.NONE), len(payload))
    # librdkafka's snappy is a raw block without magic; 3.7 passes it on as it came.
    codec = CompressionType.SNAPPY
    try:
        decoded = decompress(codec, payload, max_bytes)
    except (InvalidRecordError, TelemetryTooLargeError):
        raise InvalidRecordError("the forwarded payload is not OTLP MetricsData") from None
    if not _well_formed(decoded):
        raise InvalidRecordError("the forwarded payload is not OTLP MetricsData")
    return _counted(ForwardedPayload(payload, int(codec), len(decoded)), codec, stats)


def _counted(
    forwarded: ForwardedPayload, codec: CompressionType, stats: ForwardStats | None
) -> ForwardedPayload:
    if stats is not None:
        stats.decompressed[codec] += 1
    return forwarded


def _well_formed(data: bytes) -> bool:
    """Whether ``data``'s top level is well-formed ``MetricsData`` wire format.

    Every field's tag, wire type and length fit, the last one ends at the
    end, and ``resource_metrics`` (field 1) is length-delimited. One step
    per resource, none per data point.
    """
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = _varint(data, pos)
        if pos < 0 or tag >> 3 == 0:
            return False
        wire = tag & 7
        if tag >> 3 == 1 and wire != 2:
            return False
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos < 0:
                return False
            pos += length
        else:
            return False
        if pos < 0 or pos > end:
            return False
    return True


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it (-1: cut short or over 10 bytes)."""
    result = shift = 0
    end = len(data)
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    return 0, -1


class ForwardCollector(Collector):
    """``kip714_forward_pushes_total{error_code}``, ``kip714_forward_decompressed_total{codec}``."""

    def __init__(self, stats: ForwardStats) -> None:
        self.stats = stats

    def collect(self) -> Iterable[Metric]:
        answers = CounterMetricFamily(
            "kip714_forward_pushes",
            "Forwarded pushes answered, by the Kafka error code of the push's answer.",
            labels=["error_code"],
        )
        for code, count in sorted(self.stats.answers.items()):
            answers.add_metric([code.name], count)
        yield answers
        decompressed = CounterMetricFamily(
            "kip714_forward_decompressed",
            "Forwarded payloads that arrived compressed (Kafka 3.7 brokers), by codec.",
            labels=["codec"],
        )
        for codec, count in sorted(self.stats.decompressed.items()):
            decompressed.add_metric([codec.name.lower()], count)
        yield decompressed
