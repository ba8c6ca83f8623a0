"""decode_request / encode_response: dispatch, the three refusals, and hostile input."""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.wire import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ApiVersionsRequest,
    GetTelemetrySubscriptionsRequest,
    MalformedFrameError,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataTopic,
    PushTelemetryResponse,
    RequestHeader,
    UnsupportedApiKeyError,
    UnsupportedVersionError,
    WireError,
    api_versions_response,
    build_metadata_response,
    decode_request,
    encode_request,
    encode_response,
    parse_size_prefix,
    unsupported_api_versions_response,
)
from tests.telemetry.wire import golden_frames as g

CID = bytes.fromhex("0004") + b"test"
TOPIC_ID = UUID("00112233-4455-6677-8899-aabbccddeeff")


def test_supported_versions_table_is_what_apiversions_advertises() -> None:
    assert list(SUPPORTED_VERSIONS) == [18, 3, 71, 72, 10, 22]
    assert [(r.min_version, r.max_version) for r in SUPPORTED_VERSIONS.values()] == [
        (0, 4),
        (0, 12),
        (0, 0),
        (0, 0),
        (0, 6),
        (0, 5),
    ]
    assert {key.name: key.value for key in ApiKey} == {
        "METADATA": 3,
        "FIND_COORDINATOR": 10,
        "API_VERSIONS": 18,
        "INIT_PRODUCER_ID": 22,
        "GET_TELEMETRY_SUBSCRIPTIONS": 71,
        "PUSH_TELEMETRY": 72,
    }


def test_unknown_api_key_is_distinct_and_keeps_the_header() -> None:
    # Produce (key 0) v9 from a client that assumes a full broker.
    frame = bytes.fromhex("0000 0009 0000002a") + CID + b"\x00" + b"garbage"
    with pytest.raises(UnsupportedApiKeyError) as info:
        decode_request(frame)
    assert not isinstance(info.value, MalformedFrameError)
    assert info.value.header == RequestHeader(
        api_key=0, api_version=9, correlation_id=42, client_id="test"
    )


@pytest.mark.parametrize(("api_key", "version"), [(18, 5), (18, -1), (3, 13), (71, 1), (72, 1)])
def test_unsupported_version_of_a_known_key_keeps_the_header(api_key: int, version: int) -> None:
    frame = (
        api_key.to_bytes(2, "big")
        + version.to_bytes(2, "big", signed=True)
        + bytes.fromhex("00000063")
        + CID
        + b"\x07 whatever follows is not read"
    )
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(frame)
    assert info.value.header.correlation_id == 0x63
    assert info.value.header.api_key == api_key
    assert info.value.header.api_version == version


def test_unsupported_api_versions_answer_is_v0_with_error_35_and_its_own_range() -> None:
    frame = bytes.fromhex("0012 0007 00000007") + CID + b"\x00\x01\x01\x00"
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(frame)
    answer = encode_response(info.value.header, 18, 0, unsupported_api_versions_response())
    assert answer.hex() == (
        "00000010"  # size
        "00000007"  # correlation id, header v0
        "0023"  # UNSUPPORTED_VERSION
        "00000001"  # INT32 array count
        "0012 0000 0004".replace(" ", "")
    )


def test_api_versions_v0_and_v1_responses_by_hand() -> None:
    entries = (
        "0012 0000 0004 0003 0000 000c 0047 0000 0000 0048 0000 0000 000a 0000 0006 0016 0000 0005"
    ).replace(" ", "")
    v0 = encode_response(5, 18, 0, api_versions_response())
    assert v0.hex() == "0000002e00000005000000000006" + entries
    v1 = encode_response(5, 18, 1, api_versions_response(throttle_time_ms=9))
    assert v1.hex() == "0000003200000005000000000006" + entries + "00000009"


def test_api_versions_v0_request_has_an_empty_body() -> None:
    header, request = decode_request(bytes.fromhex("0012 0000 00000001 ffff"))
    assert header.client_id is None
    assert request == ApiVersionsRequest()


def test_metadata_v0_empty_topic_array_means_all_topics() -> None:
    _, request = decode_request(bytes.fromhex("0003 0000 00000001") + CID + bytes(4))
    assert request == MetadataRequest(topics=None)


def test_metadata_v1_null_array_means_all_and_empty_means_none() -> None:
    _, all_topics = decode_request(
        bytes.fromhex("0003 0001 00000001") + CID + bytes.fromhex("ffffffff")
    )
    _, no_topics = decode_request(bytes.fromhex("0003 0001 00000001") + CID + bytes(4))
    assert all_topics == MetadataRequest(topics=None)
    assert no_topics == MetadataRequest(topics=())


def test_metadata_v0_response_for_a_named_topic_by_hand() -> None:
    frame = bytes.fromhex("0003 0000 00000009") + CID + bytes.fromhex("00000001 0001 74")
    header, request = decode_request(frame)
    assert request == MetadataRequest(topics=(MetadataRequestTopic(name="t"),))
    assert isinstance(request, MetadataRequest)
    response = build_metadata_response(
        request, 0, node_id=1, host="127.0.0.1", port=9092, cluster_id="c"
    )
    assert (
        encode_response(header, 3, 0, response).hex()
        == (
            "00000028"  # size 40
            "00000009"  # correlation id
            "00000001"
            "00000001"
            "0009"
            + b"127.0.0.1".hex()
            + "00002384"  # one broker
            + "00000001"
            "0003"
            "000174"
            "00000000"  # topic t: UNKNOWN_TOPIC_OR_PARTITION
        )
    )


def test_metadata_v8_response_by_hand_has_header_v0_and_cluster_operations() -> None:
    response = MetadataResponse(brokers=(), cluster_id=None, controller_id=1)
    assert encode_response(2, 3, 8, response).hex() == (
        "0000001a"  # size 26
        "00000002"  # correlation id, no tag byte before v9
        "00000000"  # ThrottleTimeMs
        "00000000"  # Brokers
        "ffff"  # ClusterId null
        "00000001"  # ControllerId
        "00000000"  # Topics
        "80000000"  # ClusterAuthorizedOperations: omitted
    )


def test_metadata_v10_v12_topic_ids() -> None:
    body = bytes.fromhex("02") + TOPIC_ID.bytes + bytes.fromhex("00 00 01 00 00")
    for version in (10, 12):
        frame = bytes.fromhex("0003") + version.to_bytes(2, "big") + bytes(4) + CID + b"\x00" + body
        if version == 10:
            frame += b"\x00"  # IncludeClusterAuthorizedOperations exists only in v8-v10
        header, request = decode_request(frame)
        assert isinstance(request, MetadataRequest)
        assert request.topics == (MetadataRequestTopic(name=None, topic_id=TOPIC_ID),)
        assert request.allow_auto_topic_creation
        response = build_metadata_response(
            request, version, node_id=1, host="h", port=1, cluster_id=None
        )
        expected = (
            MetadataTopic(error_code=100, name=None, topic_id=TOPIC_ID)
            if version == 12
            else MetadataTopic(error_code=42, name="", topic_id=TOPIC_ID)
        )
        assert response.topics == (expected,)
        assert encode_response(header, 3, version, response)


def test_trailing_bytes_after_a_request_are_malformed() -> None:
    with pytest.raises(MalformedFrameError):
        decode_request(g.GET_TELEMETRY_SUBSCRIPTIONS_V0_REQUEST + b"\x00")


def test_frames_in_bytearray_or_memoryview_decode_alike() -> None:
    expected = decode_request(g.PUSH_TELEMETRY_V0_REQUEST)
    assert decode_request(bytearray(g.PUSH_TELEMETRY_V0_REQUEST)) == expected
    assert decode_request(memoryview(g.PUSH_TELEMETRY_V0_REQUEST)) == expected


def test_encoders_refuse_what_the_version_cannot_say() -> None:
    header = RequestHeader(api_key=3, api_version=0, correlation_id=1, client_id=None)
    with pytest.raises(ValueError, match="no topics"):
        encode_request(header, MetadataRequest(topics=()))
    by_id = MetadataRequest(topics=(MetadataRequestTopic(name=None, topic_id=TOPIC_ID),))
    with pytest.raises(ValueError, match="by id"):
        encode_request(
            RequestHeader(api_key=3, api_version=9, correlation_id=1, client_id=None), by_id
        )
    nameless = MetadataResponse(brokers=(), topics=(MetadataTopic(error_code=0, name=None),))
    with pytest.raises(ValueError, match="null topic name"):
        encode_response(1, 3, 11, nameless)
    with pytest.raises(TypeError):
        encode_response(1, 3, 12, PushTelemetryResponse())
    with pytest.raises(ValueError, match="unsupported version"):
        encode_response(1, 72, 1, PushTelemetryResponse())
    with pytest.raises(ValueError, match="unsupported api key"):
        encode_response(1, 0, 0, PushTelemetryResponse())
    with pytest.raises(ValueError, match="out of range"):
        encode_response(1, 72, 0, PushTelemetryResponse(error_code=2**15))


def test_size_prefix() -> None:
    assert parse_size_prefix(bytes.fromhex("00000208"), 1024) == 520
    for prefix in (bytes.fromhex("ffffffff"), bytes.fromhex("00000401"), b"\x00\x00"):
        with pytest.raises(MalformedFrameError):
            parse_size_prefix(prefix, 1024)


def _decode_or_wire_error(frame: bytes) -> WireError | None:
    """Decode; whatever is accepted must survive a re-encode unchanged."""
    try:
        header, request = decode_request(frame)
    except (MalformedFrameError, UnsupportedApiKeyError, UnsupportedVersionError) as exc:
        return exc
    assert decode_request(encode_request(header, request)[4:]) == (header, request)
    return None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_wire_errors(frame: bytes) -> None:
    _decode_or_wire_error(frame)


_KNOWN_PREFIXES = [
    key.to_bytes(2, "big") + version.to_bytes(2, "big") + bytes(4) + CID
    for key, supported in SUPPORTED_VERSIONS.items()
    for version in range(supported.min_version, supported.max_version + 1)
]


@settings(max_examples=300, deadline=None)
@given(prefix=st.sampled_from(_KNOWN_PREFIXES), body=st.binary(max_size=64))
def test_arbitrary_bodies_of_known_requests_raise_only_malformed(
    prefix: bytes, body: bytes
) -> None:
    outcome = _decode_or_wire_error(prefix + body)
    assert outcome is None or isinstance(outcome, MalformedFrameError)


@settings(max_examples=300, deadline=None)
@given(
    frame=st.sampled_from(g.ALL_REQUESTS),
    position=st.integers(min_value=0, max_value=2**16),
    value=st.integers(min_value=0, max_value=255),
)
def test_corrupted_golden_frames_raise_only_wire_errors(
    frame: bytes, position: int, value: int
) -> None:
    index = position % len(frame)
    _decode_or_wire_error(frame[:index] + bytes([value]) + frame[index + 1 :])


@pytest.mark.parametrize("frame", g.ALL_REQUESTS)
def test_every_truncation_of_a_golden_frame_is_malformed(frame: bytes) -> None:
    for end in range(len(frame)):
        with pytest.raises(MalformedFrameError):
            decode_request(frame[:end])


def test_unknown_tags_in_a_flexible_header_and_body_are_skipped() -> None:
    # GetTelemetrySubscriptions v0 with one unknown tag (9, one byte) in the header
    # and one (0, three bytes) in the body (KIP-482 forward compatibility).
    frame = (
        bytes.fromhex("0047 0000 00000003")
        + CID
        + bytes.fromhex("01 09 01 ff")
        + TOPIC_ID.bytes
        + bytes.fromhex("01 00 03 aabbcc")
    )
    header, request = decode_request(frame)
    assert header.correlation_id == 3
    assert request == GetTelemetrySubscriptionsRequest(client_instance_id=TOPIC_ID)
