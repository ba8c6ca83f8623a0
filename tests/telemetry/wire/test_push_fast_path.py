"""The PushTelemetry v0 fast path agrees with the generic decoder on every frame."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.wire import (
    ApiKey,
    MalformedFrameError,
    PushTelemetryRequest,
    PushTelemetryResponse,
    RequestHeader,
    decode_request,
    encode_push_response_v0,
    encode_request,
    encode_response,
    push_v0_fields,
)
from telemetry.wire import frames as wire_frames
from telemetry.wire.headers import read_request_header_prefix
from telemetry.wire.primitives import Reader
from tests.telemetry.wire.strategies import headers, push_telemetry_requests


def generic(frame: bytes) -> object:
    """The reference: what decode_request answers when the fast path steps aside."""
    reader = Reader(frame)
    header = read_request_header_prefix(reader)
    reader.tagged_fields()
    request = PushTelemetryRequest.read(reader, 0)
    reader.expect_end()
    return header, request


@settings(max_examples=300, deadline=None)
@given(headers(72, 0), push_telemetry_requests())
def test_fast_path_equals_the_generic_decoder(header: RequestHeader, request: object) -> None:
    assert isinstance(request, PushTelemetryRequest)
    frame = encode_request(header, request)[4:]
    assert decode_request(frame) == generic(frame) == (header, request)


@settings(max_examples=300, deadline=None)
@given(headers(72, 0), push_telemetry_requests(), st.data())
def test_a_damaged_frame_is_never_read_differently(
    header: RequestHeader, request: object, data: st.DataObject
) -> None:
    assert isinstance(request, PushTelemetryRequest)
    frame = bytearray(encode_request(header, request)[4:])
    index = data.draw(st.integers(min_value=4, max_value=len(frame) - 1))
    frame[index] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=len(frame) - 3, max_value=len(frame) + 2))
    damaged = bytes(frame[:cut]) + b"\x00" * max(0, cut - len(frame))
    fast = wire_frames._decode_push_v0(damaged)
    try:
        expected = generic(damaged)
    except MalformedFrameError:
        assert fast is None
        return
    assert fast is None or fast == expected


def test_the_common_frame_takes_the_fast_path() -> None:
    header = RequestHeader(api_key=72, api_version=0, correlation_id=7, client_id="producer-1")
    request = PushTelemetryRequest(
        client_instance_id=uuid.uuid4(),
        subscription_id=-5,
        terminating=True,
        compression_type=4,
        metrics=b"\x28\xb5\x2f\xfd" + bytes(300),
    )
    frame = encode_request(header, request)[4:]
    assert wire_frames._decode_push_v0(frame) == (header, request)


@pytest.mark.parametrize("client_id", [None, ""])
def test_unusual_client_ids_go_the_generic_way(client_id: str | None) -> None:
    header = RequestHeader(api_key=72, api_version=0, correlation_id=1, client_id=client_id)
    request = PushTelemetryRequest(
        client_instance_id=uuid.uuid4(), subscription_id=1, terminating=False,
        compression_type=0, metrics=b"x",
    )  # fmt: skip
    frame = encode_request(header, request)[4:]
    assert decode_request(frame) == (header, request)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.integers(min_value=0, max_value=2**31 - 1),
    st.integers(min_value=-(2**15), max_value=2**15 - 1),
)
def test_the_push_response_in_one_pack_is_encode_response(
    correlation_id: int, throttle_time_ms: int, error_code: int
) -> None:
    response = PushTelemetryResponse(throttle_time_ms=throttle_time_ms, error_code=error_code)
    expected = encode_response(correlation_id, ApiKey.PUSH_TELEMETRY, 0, response)
    assert encode_push_response_v0(correlation_id, throttle_time_ms, error_code) == expected


@settings(max_examples=200, deadline=None)
@given(headers(72, 0), push_telemetry_requests())
def test_the_push_fields_are_the_decoded_request(header: RequestHeader, request: object) -> None:
    assert isinstance(request, PushTelemetryRequest)
    frame = encode_request(header, request)[4:]
    fields = push_v0_fields(frame)
    if fields is None:  # null metrics, a null client id: the generic reader's shapes
        assert request.metrics_was_null or header.client_id is None
        return
    assert fields == (
        header.correlation_id,
        header.client_id,
        request.client_instance_id.bytes,
        request.subscription_id,
        request.terminating,
        request.compression_type,
        request.metrics,
    )
