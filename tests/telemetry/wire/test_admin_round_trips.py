"""The admin-plane codec: encode → decode is the identity, every truncation is refused,
and none of it changes what ApiVersions advertises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.wire import (
    SUPPORTED_API_VERSIONS,
    MalformedFrameError,
    RequestHeader,
    UnsupportedApiKeyError,
    UnsupportedVersionError,
    decode_request,
    encode_request,
)
from telemetry.wire.admin_apis import (
    ADMIN_VERSIONS,
    AdminApiKey,
    decode_admin_request,
    decode_admin_response,
    encode_admin_request,
    encode_admin_response,
)
from telemetry.wire.config_messages import ConfigResource, ListConfigResourcesResponse
from telemetry.wire.sasl_messages import SaslHandshakeRequest
from telemetry.wire.telemetry_messages import GetTelemetrySubscriptionsRequest
from tests.telemetry.wire import admin_strategies as a
from tests.telemetry.wire import strategies as s

ROUND_TRIP = settings(max_examples=20, deadline=None)


@pytest.mark.parametrize(("api_key", "version"), a.ADMIN_ALL_VERSIONS)
@ROUND_TRIP
@given(data=st.data())
def test_request_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    header = data.draw(s.headers(api_key, version))
    request = data.draw(a.admin_requests(api_key, version))
    frame = encode_admin_request(header, request)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert decode_admin_request(frame[4:]) == (header, request)


@pytest.mark.parametrize(("api_key", "version"), a.ADMIN_ALL_VERSIONS)
@ROUND_TRIP
@given(data=st.data())
def test_response_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    correlation_id = data.draw(s.int32s)
    response = data.draw(a.admin_responses(api_key, version))
    frame = encode_admin_response(correlation_id, api_key, version, response)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert decode_admin_response(frame[4:], api_key, version) == (correlation_id, response)


@pytest.mark.parametrize(("api_key", "version"), a.ADMIN_ALL_VERSIONS)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_every_truncation_of_a_request_is_malformed(
    api_key: int, version: int, data: st.DataObject
) -> None:
    header = data.draw(s.headers(api_key, version))
    frame = encode_admin_request(header, data.draw(a.admin_requests(api_key, version)))[4:]
    for end in range(len(frame)):
        with pytest.raises(MalformedFrameError):
            decode_admin_request(frame[:end])
    with pytest.raises(MalformedFrameError):
        decode_admin_request(frame + b"\x00")


@pytest.mark.parametrize(("api_key", "version"), a.ADMIN_ALL_VERSIONS)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_every_truncation_of_a_response_is_malformed(
    api_key: int, version: int, data: st.DataObject
) -> None:
    frame = encode_admin_response(
        7, api_key, version, data.draw(a.admin_responses(api_key, version))
    )
    for end in range(len(frame) - 4):
        with pytest.raises(MalformedFrameError):
            decode_admin_response(frame[4 : 4 + end], api_key, version)


def test_api_versions_advertises_none_of_the_admin_keys() -> None:
    advertised = {entry.api_key for entry in SUPPORTED_API_VERSIONS}
    assert advertised == {3, 10, 18, 22, 71, 72}
    assert advertised.isdisjoint(ADMIN_VERSIONS)
    assert set(ADMIN_VERSIONS) == {17, 32, 36, 44, 48, 49, 50, 51, 74}


def test_the_served_decoder_still_refuses_admin_keys() -> None:
    header = RequestHeader(api_key=17, api_version=1, correlation_id=5, client_id="c")
    frame = encode_admin_request(header, SaslHandshakeRequest(mechanism="PLAIN"))
    with pytest.raises(UnsupportedApiKeyError):
        decode_request(frame[4:])


def test_admin_decoder_refuses_other_keys_and_versions() -> None:
    served = RequestHeader(api_key=71, api_version=0, correlation_id=1, client_id=None)
    frame = encode_request(served, GetTelemetrySubscriptionsRequest())
    with pytest.raises(UnsupportedApiKeyError):
        decode_admin_request(frame[4:])
    # DescribeConfigs v0 was removed in Kafka 4.0; v5 does not exist.
    for version in (0, 5):
        prefix = (
            AdminApiKey.DESCRIBE_CONFIGS.to_bytes(2, "big")
            + version.to_bytes(2, "big")
            + bytes.fromhex("00000009 ffff")
        )
        with pytest.raises(UnsupportedVersionError) as caught:
            decode_admin_request(prefix + b"\x00\x00\x00\x00\x00")
        assert caught.value.header.correlation_id == 9


def test_list_config_resources_v0_cannot_carry_other_types() -> None:
    response = ListConfigResourcesResponse(
        config_resources=(ConfigResource(resource_name="t", resource_type=2),)
    )
    with pytest.raises(ValueError, match="only client-metrics"):
        encode_admin_response(1, 74, 0, response)
    assert decode_admin_response(encode_admin_response(1, 74, 1, response)[4:], 74, 1) == (
        1,
        response,
    )


def test_a_lying_array_count_is_refused_before_allocation() -> None:
    # DescribeClientQuotas v1 with a components count of 2**32-2 and no bytes behind it.
    frame = bytes.fromhex("0030 0001 00000001 ffff 00") + bytes.fromhex("ffffffff0f")
    with pytest.raises(MalformedFrameError, match="exceeds"):
        decode_admin_request(frame)
