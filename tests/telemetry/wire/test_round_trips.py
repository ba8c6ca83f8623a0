"""encode → decode is the identity for every message at every supported version."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.wire import (
    MalformedFrameError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tests.telemetry.wire import strategies as s

ROUND_TRIP = settings(max_examples=20, deadline=None)


@pytest.mark.parametrize(("api_key", "version"), s.ALL_VERSIONS)
@ROUND_TRIP
@given(data=st.data())
def test_request_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    header = data.draw(s.headers(api_key, version))
    request = data.draw(s.requests(api_key, version))
    frame = encode_request(header, request)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert decode_request(frame[4:]) == (header, request)


@pytest.mark.parametrize(("api_key", "version"), s.ALL_VERSIONS)
@ROUND_TRIP
@given(data=st.data())
def test_response_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    correlation_id = data.draw(s.int32s)
    response = data.draw(s.responses(api_key, version))
    frame = encode_response(correlation_id, api_key, version, response)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert decode_response(frame[4:], api_key, version) == (correlation_id, response)


@pytest.mark.parametrize(("api_key", "version"), s.ALL_VERSIONS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_truncation_of_a_request_is_malformed(
    api_key: int, version: int, data: st.DataObject
) -> None:
    header = data.draw(s.headers(api_key, version))
    frame = encode_request(header, data.draw(s.requests(api_key, version)))[4:]
    for end in range(len(frame)):
        with pytest.raises(MalformedFrameError):
            decode_request(frame[:end])


@pytest.mark.parametrize(("api_key", "version"), s.ALL_VERSIONS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_truncation_of_a_response_is_malformed(
    api_key: int, version: int, data: st.DataObject
) -> None:
    response = data.draw(s.responses(api_key, version))
    frame = encode_response(7, api_key, version, response)[4:]
    for end in range(len(frame)):
        with pytest.raises(MalformedFrameError):
            decode_response(frame[:end], api_key, version)
