"""The Kafka listener over a real TCP socket: ApiVersions, Metadata and pipelining.

The KIP-714 error codes are in ``test_kafka_listener_push.py``, hostile input in
``test_kafka_listener_hostile.py`` and real confluent-kafka clients in
``test_kafka_listener_clients.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from telemetry.errors import ErrorCode
from telemetry.wire import (
    UNKNOWN_TOPIC_OR_PARTITION,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    Request,
    decode_response,
)
from tests.telemetry.kafka_wire_client import (
    LOOPBACK,
    SOFTWARE_NAME,
    SOFTWARE_VERSION,
    ManualClock,
    Server,
    otlp_payload,
    raw_header,
    running_server,
    sized,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

ADVERTISED = {18: (0, 4), 3: (0, 12), 71: (0, 0), 72: (0, 0), 10: (0, 6), 22: (0, 5)}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with running_server(tmp_path, clock=ManualClock()) as started:
        yield started


def ranges(response: ApiVersionsResponse) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


async def test_api_versions_v0_to_v4_on_one_connection(server: Server) -> None:
    client = await server.connect()
    for version in range(5):
        response = await client.api_versions(version)
        assert response.error_code == ErrorCode.NONE
        assert ranges(response) == ADVERTISED
        assert response.throttle_time_ms == 0
    await client.close()
    assert server.listener.stats.requests["ApiVersions"] == 5


@pytest.mark.parametrize("version", range(5))
async def test_client_software_from_api_versions_lands_in_the_log(
    server: Server, version: int
) -> None:
    client = await server.connect("software-probe")
    await client.api_versions(version, name=SOFTWARE_NAME, software_version=SOFTWARE_VERSION)
    subscription = await client.subscribe()
    payload = otlp_payload("org.apache.kafka.producer.software")
    pushed = await client.push(
        subscription.client_instance_id, subscription.subscription_id, payload
    )
    await client.close()

    assert pushed.error_code == ErrorCode.NONE
    [logged] = await server.pushes()
    assert logged.payload == payload
    assert logged.client_id == "software-probe"
    assert logged.client_source_address == LOOPBACK
    # Only v3+ carries ClientSoftwareName/Version (KIP-511).
    if version >= 3:
        assert (logged.client_software_name, logged.client_software_version) == (
            SOFTWARE_NAME,
            SOFTWARE_VERSION,
        )
    else:
        assert (logged.client_software_name, logged.client_software_version) == (None, None)


async def test_unsupported_api_versions_version_is_answered_as_v0(server: Server) -> None:
    client = await server.connect()
    # A future client's ApiVersions v9: header v2, a body the server never reads.
    body = b"\x05kafka\x041.0\x00"
    await client.write(sized(raw_header(18, 9, 4242, b"future", tags=True) + body))
    correlation_id, response = decode_response(await client.read_frame(), ApiKey.API_VERSIONS, 0)

    assert correlation_id == 4242
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert ranges(response) == {18: (0, 4)}
    # The connection stays usable: the client retries with a version both know.
    retry = await client.api_versions(4)
    assert retry.error_code == ErrorCode.NONE
    assert (await client.subscribe()).push_interval_ms == 300
    await client.close()
    assert "refused" not in server.listener.stats.closed_for


@pytest.mark.parametrize("version", range(13))
async def test_metadata_names_the_listener_as_the_only_broker(server: Server, version: int) -> None:
    client = await server.connect()
    response = await client.metadata(version)
    await client.close()

    [broker] = response.brokers
    assert (broker.node_id, broker.host, broker.port) == (1, LOOPBACK, server.port)
    assert response.topics == ()
    if version >= 1:
        assert response.controller_id == 1
    if version >= 2:
        assert response.cluster_id == "kip714"


@pytest.mark.parametrize("version", [1, 4, 9, 12])
async def test_metadata_answers_unknown_topics(server: Server, version: int) -> None:
    client = await server.connect()
    request = MetadataRequest(topics=(MetadataRequestTopic(name="telemetry-only"),))
    response = await client.call(ApiKey.METADATA, version, request, MetadataResponse)
    await client.close()

    [topic] = response.topics
    assert (topic.name, topic.error_code, topic.partitions) == (
        "telemetry-only",
        UNKNOWN_TOPIC_OR_PARTITION,
        (),
    )
    assert [b.port for b in response.brokers] == [server.port]


@pytest.mark.parametrize("version", [0, 1, 8, 9, 12])
async def test_metadata_returns_the_configured_advertised_address(
    tmp_path: Path, version: int
) -> None:
    async with running_server(
        tmp_path, advertised_host="kafka.kip714.test", advertised_port=19092
    ) as server:
        client = await server.connect()
        response = await client.metadata(version)
        await client.close()

    [broker] = response.brokers
    assert (broker.host, broker.port) == ("kafka.kip714.test", 19092)
    assert server.port != 19092


async def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    client = await server.connect()
    plan: list[tuple[int, int, Request]] = [
        (
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="p", client_software_version="1"),
        ),
        (ApiKey.METADATA, 12, MetadataRequest(topics=())),
        (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, GetTelemetrySubscriptionsRequest()),
        (ApiKey.METADATA, 1, MetadataRequest(topics=None)),
        (ApiKey.API_VERSIONS, 0, ApiVersionsRequest()),
        (ApiKey.METADATA, 0, MetadataRequest(topics=None)),
    ]
    frames = [client.frame(key, version, request) for key, version, request in plan]
    # All six frames in one write, the last one split across two writes.
    data = b"".join(frame for _, frame in frames)
    await client.write(data[:-7])
    await client.write(data[-7:])

    kinds: list[type[ApiVersionsResponse | MetadataResponse | GetTelemetrySubscriptionsResponse]]
    kinds = [
        ApiVersionsResponse,
        MetadataResponse,
        GetTelemetrySubscriptionsResponse,
        MetadataResponse,
        ApiVersionsResponse,
        MetadataResponse,
    ]
    answered = []
    for (key, version, _), (correlation_id, _), kind in zip(plan, frames, kinds, strict=True):
        got, _ = await client.receive(key, version, kind)
        assert got == correlation_id
        answered.append(got)
    await client.close()

    assert answered == [1, 2, 3, 4, 5, 6]
    assert server.listener.stats.requests == {
        "ApiVersions": 2,
        "Metadata": 3,
        "GetTelemetrySubscriptions": 1,
    }


async def test_pipelined_requests_before_a_refused_frame_are_answered(server: Server) -> None:
    client = await server.connect()
    _, first = client.frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
    _, second = client.frame(ApiKey.METADATA, 12, MetadataRequest(topics=()))
    produce = sized(raw_header(0, 9, 3, tags=True) + b"\x00" * 16)
    await client.write(first + second + produce)

    assert (await client.receive(ApiKey.API_VERSIONS, 3, ApiVersionsResponse))[0] == 1
    assert (await client.receive(ApiKey.METADATA, 12, MetadataResponse))[0] == 2
    assert await client.closed_by_server()
    await client.close()
    assert await server.wait_idle() == 0
    assert server.listener.stats.closed_for["refused"] == 1


async def test_connections_are_independent(server: Server) -> None:
    clients = [await server.connect(f"client-{n}") for n in range(5)]
    answers = [await c.subscribe() for c in clients]
    assert len({a.client_instance_id for a in answers}) == 5
    assert server.listener.stats.connections_open == 5
    for client in clients:
        await client.close()
    assert await server.wait_idle() == 0
    assert server.listener.stats.connections_accepted == 5
    assert server.listener.stats.closed_for["eof"] == 5


async def test_closing_the_listener_ends_open_connections(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server:
        clients = [await server.connect() for _ in range(3)]
        await clients[0].subscribe()
        await clients[1].write(b"\x00\x00\x00")  # mid-prefix
        await server.listener.close()
        ended = [await c.closed_by_server() for c in clients]
        for client in clients:
            await client.close()
        assert ended == [True, True, True]
        assert server.listener.stats.closed_for["shutdown"] == 3
        assert server.listener.stats.connections_open == 0


async def test_a_null_client_id_is_served(server: Server) -> None:
    client = await server.connect(client_id=None)
    await client.api_versions(3)
    subscription = await client.subscribe()
    payload = otlp_payload("org.apache.kafka.producer.anonymous")
    pushed = await client.push(
        subscription.client_instance_id, subscription.subscription_id, payload
    )
    await client.close()
    assert pushed.error_code == ErrorCode.NONE
    [logged] = await server.pushes()
    assert logged.payload == payload
    assert not logged.client_id
