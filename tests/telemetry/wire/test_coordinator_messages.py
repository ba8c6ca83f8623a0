"""FindCoordinator and InitProducerId: golden answers, and kafka-python's protocol classes
(generated from Kafka's own JSON schemas) as an independent codec at every version served."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.errors import ErrorCode
from telemetry.wire import (
    SUPPORTED_VERSIONS,
    ApiKey,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MalformedFrameError,
    RequestHeader,
    coordinator_not_available,
    decode_request,
    encode_request,
    encode_response,
    init_producer_id_response,
)
from telemetry.wire.coordinator_messages import (
    COORDINATOR_NOT_AVAILABLE_MESSAGE,
    MAX_COORDINATOR_KEYS,
)
from telemetry.wire.primitives import Reader, Writer
from tests.telemetry.wire import strategies as s
from tests.telemetry.wire.kafka_python_protocol import kafka_metadata, kafka_transaction

FIND_VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.FIND_COORDINATOR].max_version + 1)
INIT_VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.INIT_PRODUCER_ID].max_version + 1)
AGREE = settings(max_examples=25, deadline=None)
MESSAGE_HEX = COORDINATOR_NOT_AVAILABLE_MESSAGE.encode().hex()


def body(message: Any, version: int) -> bytes:
    writer = Writer()
    message.write(writer, version)
    return writer.getvalue()


def test_versions_served_are_kafka_4_brokers() -> None:
    """FindCoordinator v0–6 (v4+ batched); InitProducerId v0–5 (v6, 2PC, left out)."""
    find = SUPPORTED_VERSIONS[ApiKey.FIND_COORDINATOR]
    init = SUPPORTED_VERSIONS[ApiKey.INIT_PRODUCER_ID]
    assert (find.min_version, find.max_version, find.flexible_since) == (0, 6, 3)
    assert (init.min_version, init.max_version, init.flexible_since) == (0, 5, 2)


def test_coordinator_not_available_v6_by_hand() -> None:
    """Kafka's ``getErrorResponse``: one entry per key, ``Node.noNode()``, the error's message."""
    request = FindCoordinatorRequest(keys=("g1", "g2"), key_type=0)
    frame = encode_response(9, ApiKey.FIND_COORDINATOR, 6, coordinator_not_available(request, 7))
    entry = "036731 ffffffff 01 ffffffff 000f 22{} 00"
    expected = (
        "00000009 00"  # correlation id, response header v1 (tagged fields)
        "00000007"  # ThrottleTimeMs
        "03"  # Coordinators: 2 entries
        + entry.format(MESSAGE_HEX)
        + entry.replace("6731", "6732").format(MESSAGE_HEX)
        + "00"  # body tags
    ).replace(" ", "")
    assert frame[4:].hex() == expected
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4


def test_coordinator_not_available_v0_and_v3_by_hand() -> None:
    request = FindCoordinatorRequest(keys=("g1",))
    answer = coordinator_not_available(request)
    v0 = encode_response(1, ApiKey.FIND_COORDINATOR, 0, answer)
    assert v0[4:].hex() == "00000001 000f ffffffff 0000 ffffffff".replace(" ", "")
    v3 = encode_response(1, ApiKey.FIND_COORDINATOR, 3, answer)
    assert v3[4:].hex() == (
        f"00000001 00 00000000 000f 22{MESSAGE_HEX} ffffffff 01 ffffffff 00".replace(" ", "")
    )


def test_find_coordinator_v3_request_from_the_java_group_consumer_shape() -> None:
    header = RequestHeader(api_key=10, api_version=3, correlation_id=4, client_id="c")
    frame = bytes.fromhex("000a 0003 00000004 0001 63 00 036731 00 00".replace(" ", ""))
    assert decode_request(frame) == (header, FindCoordinatorRequest(keys=("g1",), key_type=0))


def test_init_producer_id_answers_an_idempotent_producer_with_a_fresh_id() -> None:
    """A null transactional id: a new id at epoch 0, whatever id and epoch were sent (KIP-360)."""
    bumping = InitProducerIdRequest(transaction_timeout_ms=60000, producer_id=5, producer_epoch=3)
    answer = init_producer_id_response(bumping, 42, throttle_time_ms=2)
    assert answer == InitProducerIdResponse(producer_id=42, producer_epoch=0, throttle_time_ms=2)
    frame = encode_response(3, ApiKey.INIT_PRODUCER_ID, 5, answer)
    assert frame[4:].hex() == "00000003 00 00000002 0000 000000000000002a 0000 00".replace(" ", "")
    v0 = encode_response(3, ApiKey.INIT_PRODUCER_ID, 0, answer)
    assert v0[4:].hex() == "00000003 00000002 0000 000000000000002a 0000".replace(" ", "")


def test_init_producer_id_refuses_a_transactional_producer() -> None:
    answer = init_producer_id_response(InitProducerIdRequest(transactional_id="tx"), 42)
    assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (answer.producer_id, answer.producer_epoch) == (-1, 0)


def test_init_producer_id_v5_request_as_the_java_producer_sends_it() -> None:
    """Null transactional id, timeout 60 s, no id or epoch yet (-1, -1)."""
    header = RequestHeader(api_key=22, api_version=5, correlation_id=2, client_id="p")
    request = InitProducerIdRequest(transaction_timeout_ms=60000)
    frame = encode_request(header, request)
    assert frame[4:].hex() == (
        "0016 0005 00000002 0001 70 00 00 0000ea60 ffffffffffffffff ffff 00".replace(" ", "")
    )
    assert decode_request(frame[4:]) == (header, request)


def test_find_coordinator_before_v4_carries_exactly_one_key() -> None:
    with pytest.raises(ValueError, match="exactly one key"):
        body(FindCoordinatorRequest(keys=("a", "b")), 3)
    with pytest.raises(ValueError, match="exactly one key"):
        body(FindCoordinatorResponse(coordinators=()), 2)


def test_a_batched_lookup_names_at_most_the_bound() -> None:
    at_bound = FindCoordinatorRequest(keys=("",) * MAX_COORDINATOR_KEYS)
    reader = Reader(body(at_bound, 6))
    assert FindCoordinatorRequest.read(reader, 6) == at_bound
    past = body(FindCoordinatorRequest(keys=("",) * (MAX_COORDINATOR_KEYS + 1)), 6)
    with pytest.raises(MalformedFrameError, match="more than 1000"):
        FindCoordinatorRequest.read(Reader(past), 6)


# -- kafka-python ------------------------------------------------------------------------------


def _kafka_coordinator(entry: Any) -> tuple[Any, ...]:
    return (
        entry.key,
        entry.node_id,
        entry.host,
        entry.port,
        entry.error_code,
        entry.error_message,
    )


@pytest.mark.parametrize("version", FIND_VERSIONS)
@AGREE
@given(data=st.data())
def test_find_coordinator_agrees_with_kafka_python(version: int, data: st.DataObject) -> None:
    request = data.draw(s.find_coordinator_requests(version))
    encoded = body(request, version)
    theirs = kafka_metadata.FindCoordinatorRequest.decode(encoded, version=version)
    if version >= 4:
        assert (theirs.key_type, list(theirs.coordinator_keys)) == (
            request.key_type,
            list(request.keys),
        )
    else:
        assert theirs.key == request.keys[0]
        assert (theirs.key_type if version >= 1 else 0) == request.key_type
    theirs._header = None  # decoded messages lack the slot encode() reads
    assert bytes(theirs.encode(version=version)) == encoded

    response = data.draw(s.find_coordinator_responses(version))
    encoded = body(response, version)
    answer = kafka_metadata.FindCoordinatorResponse.decode(encoded, version=version)
    if version >= 1:
        assert answer.throttle_time_ms == response.throttle_time_ms
    if version >= 4:
        ours = [
            (c.key, c.node_id, c.host, c.port, c.error_code, c.error_message)
            for c in response.coordinators
        ]
        assert [_kafka_coordinator(c) for c in answer.coordinators] == ours
    else:
        [only] = response.coordinators
        assert (answer.error_code, answer.node_id, answer.host, answer.port) == (
            only.error_code,
            only.node_id,
            only.host,
            only.port,
        )
        if version >= 1:
            assert answer.error_message == only.error_message
    answer._header = None
    assert bytes(answer.encode(version=version)) == encoded


@pytest.mark.parametrize("version", INIT_VERSIONS)
@AGREE
@given(data=st.data())
def test_init_producer_id_agrees_with_kafka_python(version: int, data: st.DataObject) -> None:
    request = data.draw(s.init_producer_id_requests(version))
    encoded = body(request, version)
    theirs = kafka_transaction.InitProducerIdRequest.decode(encoded, version=version)
    assert (theirs.transactional_id, theirs.transaction_timeout_ms) == (
        request.transactional_id,
        request.transaction_timeout_ms,
    )
    if version >= 3:
        assert (theirs.producer_id, theirs.producer_epoch) == (
            request.producer_id,
            request.producer_epoch,
        )
    theirs._header = None
    assert bytes(theirs.encode(version=version)) == encoded

    response = data.draw(s.init_producer_id_responses())
    encoded = body(response, version)
    answer = kafka_transaction.InitProducerIdResponse.decode(encoded, version=version)
    assert (
        answer.throttle_time_ms,
        answer.error_code,
        answer.producer_id,
        answer.producer_epoch,
    ) == (
        response.throttle_time_ms,
        response.error_code,
        response.producer_id,
        response.producer_epoch,
    )
    answer._header = None
    assert bytes(answer.encode(version=version)) == encoded
    reader = Reader(encoded)
    assert InitProducerIdResponse.read(reader, version) == response
    reader.expect_end()
