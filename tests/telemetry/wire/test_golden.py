"""The frames librdkafka 2.16 really sent and expected decode and encode byte for byte.

A request header's tagged-field byte read one byte off fails here first."""

from __future__ import annotations

from uuid import UUID

from telemetry.wire import (
    ZERO_UUID,
    ApiVersionsRequest,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    MetadataRequest,
    PushTelemetryRequest,
    PushTelemetryResponse,
    RequestHeader,
    api_versions_response,
    build_metadata_response,
    decode_request,
    encode_response,
)
from tests.telemetry.wire import golden_frames as g

INSTANCE_ID = UUID(g.INSTANCE_ID_HEX)


def _header(api_key: int, version: int, correlation_id: int) -> RequestHeader:
    return RequestHeader(
        api_key=api_key, api_version=version, correlation_id=correlation_id, client_id=g.CLIENT_ID
    )


def test_api_versions_v3_request_decodes_to_the_client_software() -> None:
    header, request = decode_request(g.API_VERSIONS_V3_REQUEST)
    assert header == _header(18, 3, 1)
    assert request == ApiVersionsRequest(
        client_software_name="confluent-kafka-python",
        client_software_version="2.16.1-rdkafka-2.16.0",
    )


def test_api_versions_v3_response_is_the_captured_frame_with_header_v0() -> None:
    frame = encode_response(1, 18, 3, api_versions_response())
    assert frame[:4] == (54).to_bytes(4, "big")
    assert frame[4:] == g.API_VERSIONS_V3_RESPONSE


def test_metadata_v12_brokers_only_request() -> None:
    header, request = decode_request(g.METADATA_V12_REQUEST)
    assert header == _header(3, 12, 2)
    assert request == MetadataRequest(
        topics=(),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def test_metadata_v12_response_is_the_captured_frame() -> None:
    header, request = decode_request(g.METADATA_V12_REQUEST)
    assert isinstance(request, MetadataRequest)
    response = build_metadata_response(
        request,
        12,
        node_id=1,
        host="127.0.0.1",
        port=0xAF23,
        cluster_id="kip714-probe-cluster",
    )
    frame = encode_response(header, 3, 12, response)
    assert frame == (57).to_bytes(4, "big") + g.METADATA_V12_RESPONSE


def test_get_telemetry_subscriptions_v0_first_request_has_the_zero_id() -> None:
    header, request = decode_request(g.GET_TELEMETRY_SUBSCRIPTIONS_V0_REQUEST)
    assert header == _header(71, 0, 3)
    assert request == GetTelemetrySubscriptionsRequest(client_instance_id=ZERO_UUID)


def test_get_telemetry_subscriptions_v0_response_is_the_captured_frame() -> None:
    response = GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0,
        error_code=0,
        client_instance_id=INSTANCE_ID,
        subscription_id=0x50A263BD,
        accepted_compression_types=(4, 3, 1, 2),
        push_interval_ms=1000,
        telemetry_max_bytes=1048576,
        delta_temporality=True,
        requested_metrics=("*",),
    )
    frame = encode_response(3, 71, 0, response)
    assert frame == (49).to_bytes(4, "big") + g.GET_TELEMETRY_SUBSCRIPTIONS_V0_RESPONSE


def test_push_telemetry_v0_request_carries_the_zstd_payload() -> None:
    header, request = decode_request(g.PUSH_TELEMETRY_V0_REQUEST)
    assert header == _header(72, 0, 4)
    assert request == PushTelemetryRequest(
        client_instance_id=INSTANCE_ID,
        subscription_id=0x50A263BD,
        terminating=False,
        compression_type=4,
        metrics=g.PUSH_PAYLOAD,
    )
    assert request.metrics[:4] == b"\x28\xb5\x2f\xfd"
    assert len(request.metrics) == 463


def test_push_telemetry_v0_response_is_the_captured_frame() -> None:
    frame = encode_response(4, 72, 0, PushTelemetryResponse(throttle_time_ms=0, error_code=0))
    assert frame == (12).to_bytes(4, "big") + g.PUSH_TELEMETRY_V0_RESPONSE


def _push_with_metrics_field(field: bytes) -> bytes:
    body_start = len(g.PUSH_TELEMETRY_V0_REQUEST) - len(g.PUSH_PAYLOAD) - 3
    return g.PUSH_TELEMETRY_V0_REQUEST[:body_start] + field + b"\x00"


def test_push_with_empty_metrics_from_librdkafka_2_16() -> None:
    _, request = decode_request(_push_with_metrics_field(b"\x01"))
    assert isinstance(request, PushTelemetryRequest)
    assert request.metrics == b""
    assert not request.metrics_was_null


def test_push_with_null_metrics_from_librdkafka_2_5_to_2_10_is_accepted_as_empty() -> None:
    _, request = decode_request(_push_with_metrics_field(b"\x00"))
    assert isinstance(request, PushTelemetryRequest)
    assert request.metrics == b""
    assert request.metrics_was_null
    assert request.subscription_id == 0x50A263BD
