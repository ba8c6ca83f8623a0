"""kafka-python's protocol classes, generated from Kafka's own JSON schemas, as an
independent codec: what it encodes the admin decoders must read, what they encode
it must read back field for field, at every version both sides know."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.wire.admin_apis import AdminRequest, AdminResponse
from telemetry.wire.config_messages import (
    AlterableConfig,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    IncrementalAlterConfigsRequest,
)
from telemetry.wire.primitives import Reader, Writer
from tests.telemetry.wire import admin_strategies as a
from tests.telemetry.wire.kafka_python_protocol import kafka_admin, kafka_sasl

_CLASSES: dict[int, tuple[Any, Any]] = {
    17: (kafka_sasl.SaslHandshakeRequest, kafka_sasl.SaslHandshakeResponse),
    32: (kafka_admin.DescribeConfigsRequest, kafka_admin.DescribeConfigsResponse),
    36: (kafka_sasl.SaslAuthenticateRequest, kafka_sasl.SaslAuthenticateResponse),
    44: (kafka_admin.IncrementalAlterConfigsRequest, kafka_admin.IncrementalAlterConfigsResponse),
    48: (kafka_admin.DescribeClientQuotasRequest, kafka_admin.DescribeClientQuotasResponse),
    49: (kafka_admin.AlterClientQuotasRequest, kafka_admin.AlterClientQuotasResponse),
    50: (
        kafka_admin.DescribeUserScramCredentialsRequest,
        kafka_admin.DescribeUserScramCredentialsResponse,
    ),
    51: (
        kafka_admin.AlterUserScramCredentialsRequest,
        kafka_admin.AlterUserScramCredentialsResponse,
    ),
    74: (kafka_admin.ListConfigResourcesRequest, kafka_admin.ListConfigResourcesResponse),
}


def _kafka_plain(value: Any, version: int) -> Any:
    """A kafka-python message as nested dicts of the fields its version carries."""
    if isinstance(value, list):
        return [_kafka_plain(item, version) for item in value]
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    struct = getattr(value, "_struct", None)
    if struct is None:
        return value
    plain = {
        field.name: _kafka_plain(getattr(value, field.name), version)
        for field in struct.untagged_fields(version)
    }
    # DescribeUserScramCredentials' Users is an array of {Name} structs; kip714 keeps names.
    if "users" in plain and plain["users"] is not None and "user" not in plain:
        plain["users"] = [user["name"] for user in plain["users"]]
    return plain


def _ours_plain(value: Any, keys_like: Any) -> Any:
    """Our message reduced to the shape (and field names) of kafka-python's."""
    if isinstance(keys_like, dict):
        assert dataclasses.is_dataclass(value)
        return {key: _ours_plain(getattr(value, key), keys_like[key]) for key in keys_like}
    if isinstance(keys_like, list):
        assert isinstance(value, tuple)
        assert len(value) == len(keys_like)
        return [_ours_plain(item, like) for item, like in zip(value, keys_like, strict=True)]
    if isinstance(value, tuple):
        return list(value)
    return value


def _ours_encode(message: AdminRequest | AdminResponse, version: int) -> bytes:
    writer = Writer()
    message.write(writer, version)
    return writer.getvalue()


# kafka-python also knows DescribeConfigs v0; the admin codec starts at v1, as Kafka 4.0 does.
_BOTH_KNOW = [(key, version) for key, version in a.ADMIN_ALL_VERSIONS if key in _CLASSES]


@pytest.mark.parametrize(("api_key", "version"), _BOTH_KNOW)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_requests_agree_with_kafka_python(api_key: int, version: int, data: st.DataObject) -> None:
    ours = data.draw(a.admin_requests(api_key, version))
    body = _ours_encode(ours, version)
    kafka_request = _CLASSES[api_key][0].decode(body, version=version)
    theirs = _kafka_plain(kafka_request, version)
    assert _ours_plain(ours, theirs) == theirs
    kafka_request._header = None  # decoded messages lack the slot encode() reads
    kafka_body = bytes(kafka_request.encode(version=version))
    assert kafka_body == body
    reader = Reader(kafka_body)
    assert type(ours).read(reader, version) == ours
    reader.expect_end()


@pytest.mark.parametrize(("api_key", "version"), _BOTH_KNOW)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_responses_agree_with_kafka_python(api_key: int, version: int, data: st.DataObject) -> None:
    ours = data.draw(a.admin_responses(api_key, version))
    body = _ours_encode(ours, version)
    kafka_response = _CLASSES[api_key][1].decode(body, version=version)
    theirs = _kafka_plain(kafka_response, version)
    assert _ours_plain(ours, theirs) == theirs
    kafka_response._header = None
    assert bytes(kafka_response.encode(version=version)) == body


def test_kafka_python_client_requests_decode() -> None:
    """Requests as kafka-python's admin client builds them (positional tuples)."""
    describe = kafka_admin.DescribeConfigsRequest(
        resources=[(16, "sub1", None)], include_synonyms=True, version=4
    )
    request = DescribeConfigsRequest.read(Reader(bytes(describe.encode())), 4)
    assert request.resources == (
        DescribeConfigsResource(resource_type=16, resource_name="sub1", configuration_keys=None),
    )
    assert request.include_synonyms
    alter = kafka_admin.IncrementalAlterConfigsRequest(
        resources=[(16, "sub1", [("interval.ms", 0, "1000"), ("match", 1, None)])],
        validate_only=True,
        version=1,
    )
    decoded = IncrementalAlterConfigsRequest.read(Reader(bytes(alter.encode())), 1)
    assert decoded.validate_only
    assert decoded.resources[0].configs == (
        AlterableConfig(name="interval.ms", config_operation=0, value="1000"),
        AlterableConfig(name="match", config_operation=1, value=None),
    )
