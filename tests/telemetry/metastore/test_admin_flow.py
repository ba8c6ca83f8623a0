"""The foundations together, as the listener will chain them: frames a Kafka client
(kafka-python's schema-generated classes) sends are decoded, evaluated, made durable in
the store, survive a reopen, and come back in responses the client decodes; a SCRAM
credential set through AlterUserScramCredentials then authenticates a scramp client."""

from __future__ import annotations

import hashlib
from pathlib import Path

import scramp

from telemetry.admin.client_metrics_alter import alter_client_metrics
from telemetry.admin.precedence import describe_client_metrics
from telemetry.admin.quota_alter import alter_client_quotas, describe_client_quotas
from telemetry.metastore import MetadataStore, UserScramCredentialRecord
from telemetry.security import ScramMechanism, ScramServer, credential_from_salted_password
from telemetry.wire import RequestHeader
from telemetry.wire.admin_apis import decode_admin_request, encode_admin_response
from telemetry.wire.config_messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from telemetry.wire.quota_messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from telemetry.wire.scram_messages import AlterUserScramCredentialsRequest
from tests.telemetry.wire.kafka_python_protocol import kafka_admin


def _request_frame(message: object, correlation_id: int) -> bytes:
    message.with_header(correlation_id=correlation_id, client_id="kafka-python")  # type: ignore[attr-defined]
    return bytes(message.encode(header=True))  # type: ignore[attr-defined]


def _reply_to(header: RequestHeader) -> tuple[int, int, int]:
    return header.correlation_id, header.api_key, header.api_version


def test_subscription_alter_survives_reopen_and_describes_with_source_7(tmp_path: Path) -> None:
    frame = _request_frame(
        kafka_admin.IncrementalAlterConfigsRequest(
            resources=[(16, "sub1", [("interval.ms", 0, "1000"), ("metrics", 0, "*")])],
            validate_only=False,
            version=1,
        ),
        11,
    )
    header, request = decode_admin_request(frame)
    assert header == RequestHeader(
        api_key=44, api_version=1, correlation_id=11, client_id="kafka-python"
    )
    assert isinstance(request, IncrementalAlterConfigsRequest)
    with MetadataStore.open(tmp_path) as store:
        resource = request.resources[0]
        current = store.image.client_metrics.get(resource.resource_name, {})
        alteration = alter_client_metrics(resource.resource_name, current, resource.configs)
        store.append(alteration.records)
    reply = encode_admin_response(
        header.correlation_id,
        header.api_key,
        header.api_version,
        IncrementalAlterConfigsResponse(responses=()),
    )
    assert kafka_admin.IncrementalAlterConfigsResponse.decode(reply[4:], version=1, header=True)

    with MetadataStore.open(tmp_path) as reopened:
        dynamic = reopened.image.client_metrics["sub1"]
    header, describe = decode_admin_request(
        _request_frame(
            kafka_admin.DescribeConfigsRequest(
                resources=[(16, "sub1", None)], include_synonyms=True, version=4
            ),
            12,
        )
    )
    assert isinstance(describe, DescribeConfigsRequest)
    result = describe_client_metrics("sub1", None, dynamic, include_synonyms=True)
    reply = encode_admin_response(*_reply_to(header), DescribeConfigsResponse(results=(result,)))
    decoded = kafka_admin.DescribeConfigsResponse.decode(reply[4:], version=4, header=True)
    configs = {c.name: (c.value, c.config_source) for c in decoded.results[0].configs}
    assert configs == {"metrics": ("*", 7), "interval.ms": ("1000", 7), "match": ("", 5)}


def test_quota_alter_is_durable_and_describes_for_kafka_python(tmp_path: Path) -> None:
    header, request = decode_admin_request(
        _request_frame(
            kafka_admin.AlterClientQuotasRequest(
                entries=[([("user", None)], [("producer_byte_rate", 1024.0, False)])],
                validate_only=False,
                version=1,
            ),
            21,
        )
    )
    assert isinstance(request, AlterClientQuotasRequest)
    with MetadataStore.open(tmp_path) as store:
        records, results = alter_client_quotas(store.image, request.entries)
        store.append(records)
    reply = encode_admin_response(*_reply_to(header), AlterClientQuotasResponse(entries=results))
    answered = kafka_admin.AlterClientQuotasResponse.decode(reply[4:], version=1, header=True)
    assert [(e.error_code, e.entity[0].entity_name) for e in answered.entries] == [(0, None)]

    header, describe = decode_admin_request(
        _request_frame(
            kafka_admin.DescribeClientQuotasRequest(
                components=[("user", 1, None)], strict=True, version=1
            ),
            22,
        )
    )
    assert isinstance(describe, DescribeClientQuotasRequest)
    with MetadataStore.open(tmp_path) as reopened:
        entries = describe_client_quotas(reopened.image, describe.components, describe.strict)
    reply = encode_admin_response(*_reply_to(header), DescribeClientQuotasResponse(entries=entries))
    decoded = kafka_admin.DescribeClientQuotasResponse.decode(reply[4:], version=1, header=True)
    assert [(v.key, v.value) for v in decoded.entries[0].values] == [("push_byte_rate", 1024.0)]


def test_scram_credential_from_the_admin_api_authenticates_after_reopen(tmp_path: Path) -> None:
    salt, iterations = b"kip714-test-salt", 8192
    # What the admin client computes on its side: Hi(password, salt, i).
    salted = hashlib.pbkdf2_hmac("sha512", b"wonderland", salt, iterations)
    _, request = decode_admin_request(
        _request_frame(
            kafka_admin.AlterUserScramCredentialsRequest(
                deletions=[],
                upsertions=[("alice", 2, iterations, salt, salted)],
                version=0,
            ),
            31,
        )
    )
    assert isinstance(request, AlterUserScramCredentialsRequest)
    (upsertion,) = request.upsertions
    mechanism = ScramMechanism.by_id(upsertion.mechanism)
    assert mechanism is ScramMechanism.SCRAM_SHA_512
    credential = credential_from_salted_password(
        mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations
    )
    with MetadataStore.open(tmp_path) as store:
        store.append(
            [
                UserScramCredentialRecord(
                    name=upsertion.name,
                    mechanism=upsertion.mechanism,
                    salt=credential.salt,
                    stored_key=credential.stored_key,
                    server_key=credential.server_key,
                    iterations=credential.iterations,
                )
            ]
        )
    stored = b"".join(path.read_bytes() for path in (tmp_path / "meta").glob("*.log"))
    assert salted not in stored  # salted and hashed keys only
    with MetadataStore.open(tmp_path) as reopened:
        credentials = reopened.image.scram_credentials
    server = ScramServer(mechanism, lambda user: credentials.get((user, mechanism.mechanism_id)))
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", "wonderland")
    client.set_server_first(server.evaluate_response(client.get_client_first().encode()).decode())
    client.set_server_final(server.evaluate_response(client.get_client_final().encode()).decode())
    assert server.username == "alice"
