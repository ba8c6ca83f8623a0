"""A forwarded push's payload made what the forward route promises: OTLP, with the broker's context.

The route's contract is decompressed OTLP ``MetricsData`` whatever the
broker, yet a Kafka 3.7 broker hands its telemetry plugins each push as the
client compressed it (``PushTelemetryRequest.decompressMetricsData`` there
returns its input; Kafka 3.8 decompresses). The plugin API gives no codec
id, so the codec is recognised by its frame's magic and the payload is
decompressed here, with the same bounded codecs as a direct push.

Why here and not in the plugin: these codecs are bounded by
``telemetry.max_decompressed_bytes`` and tested against what real clients
send, while the broker's decompression API changed between 3.7 and 3.8
(KIP-390); and decompressing on the broker would spend its CPU and send
larger requests.

A payload that still is not OTLP is refused for that push alone with
INVALID_RECORD (the plugin counts it rejected), instead of being
acknowledged and then skipped by the landing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from telemetry.core.codecs import CompressionType, compression_by_magic, decompress
from telemetry.errors import ErrorCode, InvalidRecordError, TelemetryTooLargeError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client.core import Metric

__all__ = [
    "BROKER_ID_ATTRIBUTE",
    "BROKER_LISTENER_ATTRIBUTE",
    "ForwardCollector",
    "ForwardStats",
    "forwarded_otlp",
]

BROKER_ID_ATTRIBUTE: Final = "kafka.broker.id"
BROKER_LISTENER_ATTRIBUTE: Final = "kafka.broker.listener"


@dataclass(slots=True)
class ForwardStats:
    """Per-push answers of the forward route and the payloads it had to decompress."""

    answers: Counter[ErrorCode] = field(default_factory=Counter)
    decompressed: Counter[CompressionType] = field(default_factory=Counter)


def forwarded_otlp(
    payload: bytes,
    max_bytes: int,
    broker_id: int | None,
    listener: str | None,
    *,
    stats: ForwardStats | None = None,
    share_gil: bool = False,
) -> bytes:
    """The OTLP bytes to log for one forwarded push: decompressed, checked, broker context set.

    Raises:
        TelemetryTooLargeError: decompressed, the payload exceeds ``max_bytes``.
        InvalidRecordError: the payload is neither OTLP nor a compressed OTLP frame.
    """
    codec = compression_by_magic(payload)
    if codec is not None:
        try:
            payload = decompress(codec, payload, max_bytes, share_gil=share_gil)
        except InvalidRecordError:
            codec = None  # not that codec after all: OTLP or nothing, decided below
    data = _parse(payload)
    if data is None and codec is None:
        # librdkafka's snappy is a raw block without magic; 3.7 passes it on as it came.
        codec = CompressionType.SNAPPY
        try:
            payload = decompress(codec, payload, max_bytes)
        except (InvalidRecordError, TelemetryTooLargeError):
            raise InvalidRecordError("the forwarded payload is not OTLP MetricsData") from None
        data = _parse(payload)
    if data is None:
        raise InvalidRecordError("the forwarded payload is not OTLP MetricsData")
    if codec is not None and stats is not None:
        stats.decompressed[codec] += 1
    if broker_id is None and listener is None:
        return payload
    _set_broker_attributes(data, broker_id, listener)
    serialized: bytes = data.SerializeToString()
    return serialized


def _parse(payload: bytes) -> MetricsData | None:
    data = MetricsData()
    try:
        data.ParseFromString(payload)
    except Exception:  # upb's DecodeError, or whatever else the parser raises
        return None
    return data


def _set_broker_attributes(data: MetricsData, broker_id: int | None, listener: str | None) -> None:
    """Replace any attribute a client sent under our names: it must not claim a broker."""
    ours = {BROKER_ID_ATTRIBUTE, BROKER_LISTENER_ATTRIBUTE}
    for resource_metrics in data.resource_metrics:
        attributes = resource_metrics.resource.attributes
        kept = [kv for kv in attributes if kv.key not in ours]
        del attributes[:]
        attributes.extend(kept)
        if broker_id is not None:
            attributes.append(KeyValue(key=BROKER_ID_ATTRIBUTE)).value.int_value = broker_id
        if listener is not None:
            attributes.append(KeyValue(key=BROKER_LISTENER_ATTRIBUTE)).value.string_value = listener


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
