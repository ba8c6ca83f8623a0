"""Real confluent-kafka clients (librdkafka 2.16) push KIP-714 telemetry to the listener.

A producer, a consumer (whose group coordinator is never found: it pushes
anyway) and an admin client run at the same time against one listener with a
300 ms subscription; each one's pushes, and its terminating push on close, are
checked as the ingest log stored them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from telemetry.core.client_uuid import Uuid
from telemetry.errors import ErrorCode
from tests.telemetry.kafka_real_clients import (
    ClientKind,
    ConfigValue,
    RealClient,
    client_config,
    push_then_close,
)
from tests.telemetry.kafka_wire_client import metric_names, running_server

if TYPE_CHECKING:
    from pathlib import Path

    from exporters.api import LoggedPush

SUBSCRIPTION = {"metrics": "*", "interval.ms": "300", "match": "client_id=kip714-it-.*"}
GROUP = "kip714-it-group"
EXPECTED_PREFIX: dict[ClientKind, str] = {
    "producer": "org.apache.kafka.producer.",
    "consumer": "org.apache.kafka.consumer.",
    "admin": "org.apache.kafka.producer.",  # an admin client is a producer-type handle
}


def resource_attributes(push: LoggedPush) -> dict[str, str]:
    data = MetricsData.FromString(push.payload)
    return {
        attribute.key: attribute.value.string_value
        for resource in data.resource_metrics
        for attribute in resource.resource.attributes
    }


async def test_producer_consumer_and_admin_push_telemetry(tmp_path: Path) -> None:
    async with running_server(tmp_path, subscription=SUBSCRIPTION) as server:
        configs: dict[ClientKind, dict[str, ConfigValue]] = {
            "producer": client_config(server.port, "kip714-it-producer", log_level=4),
            "consumer": client_config(
                server.port, "kip714-it-consumer", log_level=4, **{"group.id": GROUP}
            ),
            "admin": client_config(server.port, "kip714-it-admin", log_level=4),
        }
        clients = [
            await asyncio.to_thread(RealClient, kind, config) for kind, config in configs.items()
        ]
        results = await asyncio.gather(
            *(push_then_close(server, c, regular_pushes=2, timeout_s=10.0) for c in clients)
        )
        assert await server.wait_idle() == 0
        manager_stats = server.manager.stats
        listener_stats = server.listener.stats

    instance_ids: set[str] = set()
    for client, pushes in zip(clients, results, strict=True):
        kind = client.kind
        # At least two regular pushes, then exactly one terminating push, last.
        assert len(pushes) >= 3, (kind, pushes)
        assert [p.terminating for p in pushes] == [False] * (len(pushes) - 1) + [True], kind
        assert {p.client_id for p in pushes} == {client.client_id}
        assert {p.client_software_name for p in pushes} == {"confluent-kafka-python"}
        assert all((p.client_software_version or "").endswith("rdkafka-2.16.0") for p in pushes)
        assert {p.client_source_address for p in pushes} == {"127.0.0.1"}
        assert {p.push_interval_ms for p in pushes} == {300}
        assert len({p.subscription_id for p in pushes}) == 1
        [instance_id] = {p.client_instance_id for p in pushes}
        assert str(Uuid.parse(instance_id)) == instance_id  # Kafka's 22-char form
        instance_ids.add(instance_id)
        for push in pushes:
            names = metric_names(push.payload)
            assert names, kind
            assert all(name.startswith(EXPECTED_PREFIX[kind]) for name in names), (kind, names)
        assert f"{EXPECTED_PREFIX[kind]}connection.creation.total" in metric_names(
            pushes[0].payload
        )
        attributes = resource_attributes(pushes[0])
        assert attributes.get("group_id") == (GROUP if kind == "consumer" else None)

    assert len(instance_ids) == 3
    assert manager_stats.get_responses[ErrorCode.NONE] >= 3
    for refused in (
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_RECORD,
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
        ErrorCode.TELEMETRY_TOO_LARGE,
    ):
        assert manager_stats.push_responses[refused] == 0
    assert listener_stats.requests["PushTelemetry"] >= 9
    assert set(listener_stats.closed_for) <= {"eof", "reset"}


async def test_client_not_matched_by_the_subscription_sends_nothing(tmp_path: Path) -> None:
    """The subscription's match selects by client id; other clients GET but never push."""
    async with running_server(tmp_path, subscription=SUBSCRIPTION) as server:
        producer = await asyncio.to_thread(
            RealClient, "producer", client_config(server.port, "unmatched-producer", log_level=4)
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while not server.manager.stats.get_responses and loop.time() < deadline:
            await asyncio.sleep(0.02)
        gets = sum(server.manager.stats.get_responses.values())
        await asyncio.sleep(0.5)  # longer than the matched interval: still no push
        await asyncio.wait_for(asyncio.to_thread(producer.close), 5.0)
        pushes = await server.pushes()
        push_requests = server.listener.stats.requests["PushTelemetry"]

    assert gets >= 1
    assert pushes == []
    assert push_requests == 0


async def test_subscription_change_reaches_a_running_producer(tmp_path: Path) -> None:
    """The next push after a change gets 117; the client re-GETs and pushes the new selection."""
    async with running_server(tmp_path, subscription=SUBSCRIPTION) as server:
        producer = await asyncio.to_thread(
            RealClient, "producer", client_config(server.port, "kip714-it-changing", log_level=4)
        )
        before = await server.wait_for_pushes(lambda pushes: len(pushes) >= 1, timeout_s=5.0)
        assert len(before) >= 1
        server.manager.update_subscription(
            "all",
            {
                "metrics": "org.apache.kafka.producer.request.latency.",
                "interval.ms": "250",
                "match": "client_id=kip714-it-.*",
            },
        )
        old_subscription = before[0].subscription_id

        def changed(pushes: list[LoggedPush]) -> bool:
            return any(p.subscription_id != old_subscription for p in pushes)

        await server.wait_for_pushes(changed, timeout_s=8.0)
        pushes = await push_then_close(server, producer, regular_pushes=0, timeout_s=5.0)
        unknown_subscription = server.manager.stats.unknown_subscription

    old = [p for p in pushes if p.subscription_id == old_subscription]
    new = [p for p in pushes if p.subscription_id != old_subscription]
    assert old and new
    assert pushes == old + new  # no push with the old id after the change was seen
    assert len({p.subscription_id for p in new}) == 1
    assert unknown_subscription >= 1
    assert {p.push_interval_ms for p in old} == {300}
    assert {p.push_interval_ms for p in new} == {250}
    assert "org.apache.kafka.producer.connection.creation.total" in metric_names(old[0].payload)
    for push in new:
        names = metric_names(push.payload)
        assert names
        assert all(n.startswith("org.apache.kafka.producer.request.latency.") for n in names)
    assert new[-1].terminating
