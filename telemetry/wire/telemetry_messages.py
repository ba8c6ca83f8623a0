"""GetTelemetrySubscriptions (key 71) and PushTelemetry (key 72) v0, the KIP-714 pair.

Both are flexible from v0, so every string, array and bytes field is compact
and every struct ends with a KIP-482 tagged-field section. Field order follows
``GetTelemetrySubscriptions{Request,Response}.json`` and
``PushTelemetry{Request,Response}.json`` exactly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self
from uuid import UUID

from telemetry.wire.primitives import ZERO_UUID

if TYPE_CHECKING:
    from telemetry.wire.primitives import Reader, Writer

# PushTelemetry answers dominate the hot path (one per push per client), and
# their body is fixed-size: ThrottleTimeMs, ErrorCode, empty tagged fields.
_PUSH_RESPONSE_BODY: Final = struct.Struct(">ihB")
# ClientInstanceId, SubscriptionId, Terminating (any non-zero byte is true, as
# Kafka's readByte() != 0), CompressionType: the fixed-width head of a push.
_PUSH_REQUEST_HEAD: Final = struct.Struct(">16si?b")


@dataclass(frozen=True, slots=True, kw_only=True)
class GetTelemetrySubscriptionsRequest:
    """``client_instance_id`` is the zero UUID on a client's first request."""

    client_instance_id: UUID = ZERO_UUID

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        client_instance_id = reader.uuid()
        reader.tagged_fields()
        return cls(client_instance_id=client_instance_id)

    def write(self, writer: Writer, version: int) -> None:
        writer.uuid(self.client_instance_id)
        writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class GetTelemetrySubscriptionsResponse:
    """Defaults are Kafka's error-response defaults (``getErrorResponse``):
    only ``error_code`` and ``throttle_time_ms`` are set on a refusal."""

    error_code: int = 0
    throttle_time_ms: int = 0
    client_instance_id: UUID = ZERO_UUID
    subscription_id: int = 0
    accepted_compression_types: tuple[int, ...] = ()
    push_interval_ms: int = 0
    telemetry_max_bytes: int = 0
    delta_temporality: bool = False
    requested_metrics: tuple[str, ...] = ()

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        throttle_time_ms = reader.int32()
        error_code = reader.int16()
        client_instance_id = reader.uuid()
        subscription_id = reader.int32()
        accepted = reader.int8_array(compact=True)
        push_interval_ms = reader.int32()
        telemetry_max_bytes = reader.int32()
        delta_temporality = reader.boolean()
        requested = tuple(reader.array(lambda r: r.string(compact=True), compact=True))
        reader.tagged_fields()
        return cls(
            error_code=error_code,
            throttle_time_ms=throttle_time_ms,
            client_instance_id=client_instance_id,
            subscription_id=subscription_id,
            accepted_compression_types=accepted,
            push_interval_ms=push_interval_ms,
            telemetry_max_bytes=telemetry_max_bytes,
            delta_temporality=delta_temporality,
            requested_metrics=requested,
        )

    def write(self, writer: Writer, version: int) -> None:
        writer.int32(self.throttle_time_ms)
        writer.int16(self.error_code)
        writer.uuid(self.client_instance_id)
        writer.int32(self.subscription_id)
        writer.int8_array(self.accepted_compression_types, compact=True)
        writer.int32(self.push_interval_ms)
        writer.int32(self.telemetry_max_bytes)
        writer.boolean(self.delta_temporality)
        writer.array_length(len(self.requested_metrics), compact=True)
        for prefix in self.requested_metrics:
            writer.string(prefix, compact=True)
        writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class PushTelemetryRequest:
    """A push; ``metrics`` is the (possibly compressed) OTLP ``MetricsData``.

    The schema makes Metrics non-nullable, but librdkafka 2.5.0–2.10.0 sent a
    null there when no metric matched (librdkafka #5106) and Kafka disconnects
    such clients. kip714 is lenient: null decodes as empty, and
    ``metrics_was_null`` keeps the fact for logging.
    """

    client_instance_id: UUID
    subscription_id: int
    terminating: bool
    compression_type: int
    metrics: bytes
    metrics_was_null: bool = False

    def __post_init__(self) -> None:
        if self.metrics_was_null and self.metrics:
            raise ValueError("metrics_was_null with a non-empty payload")

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        instance_id, subscription_id, terminating, compression_type = reader.unpack(
            _PUSH_REQUEST_HEAD
        )
        metrics = reader.nullable_bytes(compact=True)
        reader.tagged_fields()
        return cls(
            client_instance_id=UUID(bytes=instance_id),
            subscription_id=subscription_id,
            terminating=terminating,
            compression_type=compression_type,
            metrics=b"" if metrics is None else metrics,
            metrics_was_null=metrics is None,
        )

    def write(self, writer: Writer, version: int) -> None:
        writer.uuid(self.client_instance_id)
        writer.int32(self.subscription_id)
        writer.boolean(self.terminating)
        writer.int8(self.compression_type)
        writer.nullable_bytes(None if self.metrics_was_null else self.metrics, compact=True)
        writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class PushTelemetryResponse:
    error_code: int = 0
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        throttle_time_ms = reader.int32()
        error_code = reader.int16()
        reader.tagged_fields()
        return cls(error_code=error_code, throttle_time_ms=throttle_time_ms)

    def write(self, writer: Writer, version: int) -> None:
        try:
            writer.raw(_PUSH_RESPONSE_BODY.pack(self.throttle_time_ms, self.error_code, 0))
        except struct.error as exc:
            raise ValueError(f"PushTelemetry response field out of range: {exc}") from None
