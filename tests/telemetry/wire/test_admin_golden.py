"""Golden admin-plane bodies and frames from the admin-plane reference (encoded
offline with kafka-python 3.0.12 from Kafka's schemas), byte for byte."""

from __future__ import annotations

from telemetry.wire import RequestHeader
from telemetry.wire.admin_apis import decode_admin_request, encode_admin_response
from telemetry.wire.config_messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    ConfigSource,
    ConfigType,
    DescribeConfigsEntry,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
    IncrementalAlterConfigsRequest,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from telemetry.wire.primitives import Reader, Writer
from telemetry.wire.quota_messages import (
    AlterClientQuotasEntry,
    AlterClientQuotasRequest,
    ComponentData,
    DescribeClientQuotasRequest,
    EntityData,
    QuotaMatchType,
    QuotaOp,
)
from telemetry.wire.sasl_messages import SaslAuthenticateResponse, SaslHandshakeResponse


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def _body(message: DescribeConfigsResponse | ListConfigResourcesResponse, version: int) -> bytes:
    writer = Writer()
    message.write(writer, version)
    return writer.getvalue()


def test_describe_configs_v4_request() -> None:
    reader = Reader(_hex("02 10 0573756231 00 00 01 00 00"))
    assert DescribeConfigsRequest.read(reader, 4) == DescribeConfigsRequest(
        resources=(DescribeConfigsResource(resource_type=16, resource_name="sub1"),),
        include_synonyms=True,
    )
    reader.expect_end()


def test_describe_configs_v4_response_in_kafka_4_style() -> None:
    response = DescribeConfigsResponse(
        results=(
            DescribeConfigsResult(
                resource_type=16,
                resource_name="sub1",
                configs=(
                    DescribeConfigsEntry(
                        name="interval.ms",
                        value="60000",
                        config_source=ConfigSource.CLIENT_METRICS_CONFIG,
                        synonyms=(
                            DescribeConfigsSynonym(
                                name="interval.ms",
                                value="60000",
                                source=ConfigSource.CLIENT_METRICS_CONFIG,
                            ),
                        ),
                        config_type=ConfigType.INT,
                    ),
                    DescribeConfigsEntry(
                        name="metrics",
                        value="",
                        config_source=ConfigSource.DEFAULT_CONFIG,
                        config_type=ConfigType.LIST,
                    ),
                ),
            ),
        )
    )
    assert _body(response, 4) == _hex(
        "00000000 02 0000 00 10 0573756231 03 0c696e74657276616c2e6d73 063630303030 00 07 00"
        " 02 0c696e74657276616c2e6d73 063630303030 07 00 03 00 00 08 6d657472696373 01 00 05"
        " 00 01 07 00 00 00 00"
    )


def test_incremental_alter_configs_v1_request() -> None:
    reader = Reader(
        _hex(
            "02 10 0573756231 03 0c696e74657276616c2e6d73 00 0531303030 00 08 6d657472696373"
            " 00 022a 00 00 00 00"
        )
    )
    assert IncrementalAlterConfigsRequest.read(reader, 1) == IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=16,
                resource_name="sub1",
                configs=(
                    AlterableConfig(
                        name="interval.ms", config_operation=AlterConfigOp.SET, value="1000"
                    ),
                    AlterableConfig(name="metrics", config_operation=AlterConfigOp.SET, value="*"),
                ),
            ),
        )
    )
    reader.expect_end()


def test_list_config_resources_v0_and_v1() -> None:
    assert ListConfigResourcesRequest.read(Reader(_hex("00")), 0) == ListConfigResourcesRequest()
    assert ListConfigResourcesRequest.read(Reader(_hex("02 10 00")), 1) == (
        ListConfigResourcesRequest(resource_types=(16,))
    )
    response = ListConfigResourcesResponse(config_resources=(ConfigResource(resource_name="sub1"),))
    assert _body(response, 0) == _hex("00000000 0000 02 0573756231 00 00")


def test_describe_client_quotas_v1_default_user() -> None:
    reader = Reader(_hex("02 05 75736572 01 00 00 00 00"))
    assert DescribeClientQuotasRequest.read(reader, 1) == DescribeClientQuotasRequest(
        components=(
            ComponentData(entity_type="user", match_type=QuotaMatchType.DEFAULT, match=None),
        ),
        strict=False,
    )
    reader.expect_end()


def test_describe_client_quotas_v1_whole_frame() -> None:
    frame = _hex("0030 0001 00000007 0001 74 00  02 05757365720006616c69636500 01 00")
    header, request = decode_admin_request(frame)
    assert header == RequestHeader(api_key=48, api_version=1, correlation_id=7, client_id="t")
    assert request == DescribeClientQuotasRequest(
        components=(ComponentData(entity_type="user", match_type=0, match="alice"),),
        strict=True,
    )


def test_alter_client_quotas_v1_default_user() -> None:
    reader = Reader(
        _hex(
            "02 02 0575736572 00 00 02 1370726f64756365725f627974655f72617465 4090000000000000"
            " 00 00 00 00 00"
        )
    )
    assert AlterClientQuotasRequest.read(reader, 1) == AlterClientQuotasRequest(
        entries=(
            AlterClientQuotasEntry(
                entity=(EntityData(entity_type="user", entity_name=None),),
                ops=(QuotaOp(key="producer_byte_rate", value=1024.0),),
            ),
        )
    )
    reader.expect_end()


def test_sasl_handshake_v1_response() -> None:
    response = SaslHandshakeResponse(mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))
    frame = encode_admin_response(3, 17, 1, response)
    assert frame[4:] == _hex("00000003") + _hex(
        "0000 00000003 0005 504c41494e 000d 534352414d2d5348412d323536"
        " 000d 534352414d2d5348412d353132"
    )


def test_sasl_authenticate_success_v1_and_v2() -> None:
    success = SaslAuthenticateResponse()
    assert encode_admin_response(4, 36, 1, success)[4:] == _hex(
        "00000004  0000 ffff 00000000 0000000000000000"
    )
    assert encode_admin_response(4, 36, 2, success)[4:] == _hex(
        "00000004 00  0000 00 01 0000000000000000 00"
    )
