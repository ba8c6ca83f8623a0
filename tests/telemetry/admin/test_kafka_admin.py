"""The admin APIs on a running server's Kafka listener, driven by kafka-python's admin
client and by admin frames over the repo's wire client."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from telemetry.errors import ErrorCode
from telemetry.wire.admin_apis import AdminApiKey
from telemetry.wire.config_messages import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from telemetry.wire.quota_messages import (
    AlterClientQuotasEntry,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    ComponentData,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityData,
    QuotaMatchType,
    QuotaOp,
)
from tests.telemetry.admin.admin_support import (
    CLIENT_METRICS,
    admin_call,
    admin_client,
    subscription,
)
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

STATIC = '[subscriptions.base]\nmetrics = ["org.apache.kafka.producer."]\n"interval.ms" = 60000\n'


def kafka_address(server: Server) -> tuple[str, int]:
    assert server.listener is not None
    return server.listener.bound_address


async def with_admin(server: Server, work: Any, client_id: str = "kip714-admin-test") -> Any:
    """Run ``work(admin)`` with a kafka-python admin client in a thread, then close it."""

    def run() -> Any:
        admin = admin_client(*kafka_address(server), client_id)
        try:
            return work(admin)
        finally:
            admin.close()

    return await asyncio.wait_for(asyncio.to_thread(run), 60)


def set_ops(**values: str) -> tuple[AlterableConfig, ...]:
    return tuple(
        AlterableConfig(name=key.replace("_", "."), config_operation=0, value=value)
        for key, value in values.items()
    )


async def test_api_versions_advertises_exactly_what_is_served(tmp_path: Path) -> None:
    async with running(tmp_path, STATIC) as server:
        client = await WireClient.connect(*kafka_address(server), "probe")
        try:
            answer = await client.api_versions()
        finally:
            await client.close()
    advertised = {(k.api_key, k.min_version, k.max_version) for k in answer.api_keys}
    assert advertised == {
        (18, 0, 4), (3, 0, 12), (71, 0, 0), (72, 0, 0),
        (32, 1, 4), (44, 0, 1), (48, 0, 1), (49, 0, 1), (74, 0, 1),
        (17, 0, 1), (36, 0, 2), (50, 0, 0), (51, 0, 0),  # SASL and SCRAM credentials
        (10, 0, 6), (22, 0, 5),  # FindCoordinator, InitProducerId for the Java clients
    }  # fmt: skip


async def test_kafka_python_alters_lists_and_describes_a_subscription(tmp_path: Path) -> None:
    async with running(tmp_path, STATIC) as server:
        version_before = server.manager.subscriptions.version

        def work(admin: Any) -> tuple[Any, ...]:
            altered = admin.alter_configs(
                [subscription("sub1", {"interval.ms": "1000", "metrics": "*"})], incremental=True
            )
            listed = admin.list_config_resources([CLIENT_METRICS])
            dynamic = admin.describe_configs([subscription("sub1")])
            everything = admin.describe_configs([subscription("base")], config_filter="all")
            return altered, listed, dynamic, everything

        altered, listed, dynamic, everything = await with_admin(server, work)
        in_force = server.manager.subscriptions.get("sub1")
        version_after = server.manager.subscriptions.version
        stored = dict(server.admin.store.image.client_metrics["sub1"]) if server.admin else {}
    assert altered == {"client_metrics": {"sub1": "OK"}}
    assert listed == {"client_metrics": ["base", "sub1"]}
    described = dynamic["client_metrics"]["sub1"]
    assert {k: (v["value"], v["config_source"]) for k, v in described.items()} == {
        "metrics": ("*", "DYNAMIC_CLIENT_METRICS_CONFIG"),
        "interval.ms": ("1000", "DYNAMIC_CLIENT_METRICS_CONFIG"),
    }
    base = everything["client_metrics"]["base"]
    assert base["interval.ms"]["value"] == "60000"
    assert base["interval.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert in_force is not None and (in_force.metrics, in_force.interval_ms) == (("*",), 1000)
    assert version_after > version_before
    assert stored == {"metrics": "*", "interval.ms": "1000"}


async def test_kafka_validation_errors_and_validate_only_change_nothing(tmp_path: Path) -> None:
    async with running(tmp_path, STATIC) as server:
        assert server.admin is not None
        offset = server.admin.store.next_offset
        version = server.manager.subscriptions.version
        client = await WireClient.connect(*kafka_address(server), "probe")
        try:
            only_validated = await admin_call(
                client,
                AdminApiKey.INCREMENTAL_ALTER_CONFIGS,
                1,
                IncrementalAlterConfigsRequest(
                    resources=(
                        AlterConfigsResource(
                            resource_type=16, resource_name="v", configs=set_ops(interval_ms="500")
                        ),
                        AlterConfigsResource(
                            resource_type=16, resource_name="bad", configs=set_ops(interval_ms="5")
                        ),
                        AlterConfigsResource(
                            resource_type=16, resource_name="m", configs=set_ops(match="nokey")
                        ),
                        AlterConfigsResource(
                            resource_type=2, resource_name="topic", configs=set_ops(metrics="*")
                        ),
                    ),
                    validate_only=True,
                ),
            )
            quota_validated = await admin_call(
                client,
                AdminApiKey.ALTER_CLIENT_QUOTAS,
                1,
                AlterClientQuotasRequest(
                    entries=(
                        AlterClientQuotasEntry(
                            entity=(EntityData(entity_type="user", entity_name="alice"),),
                            ops=(QuotaOp(key="producer_byte_rate", value=1024.0),),
                        ),
                    ),
                    validate_only=True,
                ),
            )
        finally:
            await client.close()
        assert server.admin.store.next_offset == offset
        assert server.manager.subscriptions.version == version
        assert server.manager.subscriptions.get("v") is None
    assert isinstance(only_validated, IncrementalAlterConfigsResponse)
    assert [(r.resource_name, r.error_code, r.error_message) for r in only_validated.responses] == [
        ("v", 0, None),
        (
            "bad",
            ErrorCode.INVALID_REQUEST,
            "Invalid value 5 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
        ),
        ("m", ErrorCode.INVALID_CONFIG, "Illegal client matching pattern: nokey"),
        ("topic", ErrorCode.INVALID_REQUEST, "Unsupported resource type: 2"),
    ]
    assert isinstance(quota_validated, AlterClientQuotasResponse)
    assert [e.error_code for e in quota_validated.entries] == [0]


async def test_quotas_alter_and_describe_through_the_wire(tmp_path: Path) -> None:
    async with running(tmp_path, STATIC) as server:
        client = await WireClient.connect(*kafka_address(server), "probe")
        try:
            altered = await admin_call(
                client,
                AdminApiKey.ALTER_CLIENT_QUOTAS,
                1,
                AlterClientQuotasRequest(
                    entries=(
                        AlterClientQuotasEntry(
                            entity=(EntityData(entity_type="user", entity_name=None),),
                            ops=(QuotaOp(key="producer_byte_rate", value=1024.0),),
                        ),
                        AlterClientQuotasEntry(
                            entity=(EntityData(entity_type="ip", entity_name="10.0.0.1"),),
                            ops=(QuotaOp(key="connection_creation_rate", value=5.0),),
                        ),
                        AlterClientQuotasEntry(
                            entity=(EntityData(entity_type="user", entity_name="bob"),),
                            ops=(QuotaOp(key="consumer_byte_rate", value=5.0),),
                        ),
                    )
                ),
            )
            described = await admin_call(
                client,
                AdminApiKey.DESCRIBE_CLIENT_QUOTAS,
                1,
                DescribeClientQuotasRequest(
                    components=(
                        ComponentData(
                            entity_type="user", match_type=QuotaMatchType.DEFAULT, match=None
                        ),
                    ),
                    strict=True,
                ),
            )
        finally:
            await client.close()
        in_force = server.enforcement.quota_settings
    assert isinstance(altered, AlterClientQuotasResponse)
    assert [(e.error_code, e.error_message) for e in altered.entries] == [
        (0, None),
        (0, None),
        (ErrorCode.INVALID_REQUEST, "Invalid configuration key consumer_byte_rate"),
    ]
    assert isinstance(described, DescribeClientQuotasResponse)
    assert described.entries is not None
    [entry] = described.entries
    # Kafka's name for the key, so Kafka's ConfigCommand can delete it again.
    assert [(v.key, v.value) for v in entry.values] == [("producer_byte_rate", 1024.0)]
    assert [(c.user, c.client_id, c.push_byte_rate) for c in in_force.clients] == [
        ("<default>", None, 1024.0)
    ]
    assert [(i.ip, i.connection_creation_rate) for i in in_force.ips] == [("10.0.0.1", 5)]


async def test_unauthorised_alter_is_refused_and_reads_still_work(tmp_path: Path) -> None:
    config = STATIC + '[security]\nsuper_users = ["User:admin"]\nallow_anonymous = true\n'
    async with running(tmp_path, config) as server:

        def work(admin: Any) -> tuple[Any, Any]:
            altered = admin.alter_configs(
                [subscription("base", {"interval.ms": "1000"})],
                incremental=True,
                raise_on_unknown=False,
            )
            return altered, admin.describe_configs([subscription("base")], config_filter="all")

        altered, described = await with_admin(server, work)
        client = await WireClient.connect(*kafka_address(server), "probe")
        try:
            quotas = await admin_call(
                client,
                AdminApiKey.ALTER_CLIENT_QUOTAS,
                1,
                AlterClientQuotasRequest(
                    entries=(
                        AlterClientQuotasEntry(
                            entity=(EntityData(entity_type="client-id", entity_name="x"),),
                            ops=(QuotaOp(key="request_percentage", value=50.0),),
                        ),
                    )
                ),
            )
        finally:
            await client.close()
        assert server.admin is not None
        assert server.admin.store.next_offset == 0
        base = server.manager.subscriptions.get("base")
    assert "ClusterAuthorizationFailed" in altered["client_metrics"]["base"]
    assert described["client_metrics"]["base"]["interval.ms"]["value"] == "60000"
    assert isinstance(quotas, AlterClientQuotasResponse)
    assert [e.error_code for e in quotas.entries] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert base is not None and base.interval_ms == 60000


async def test_mutations_draw_from_the_strict_controller_mutation_rate(tmp_path: Path) -> None:
    # 0.1 mutations/s over 11 one-second windows: a burst of about one token.
    config = STATIC + ('[[quotas.clients]]\nclient_id = "probe"\ncontroller_mutation_rate = 0.1\n')
    resources = tuple(
        AlterConfigsResource(resource_type=16, resource_name=f"s{i}", configs=set_ops(metrics="*"))
        for i in range(4)
    )
    async with running(tmp_path, config) as server:
        client = await WireClient.connect(*kafka_address(server), "probe")
        try:
            validated = await admin_call(
                client,
                AdminApiKey.INCREMENTAL_ALTER_CONFIGS,
                1,
                IncrementalAlterConfigsRequest(resources=resources, validate_only=True),
            )
            altered = await admin_call(
                client,
                AdminApiKey.INCREMENTAL_ALTER_CONFIGS,
                1,
                IncrementalAlterConfigsRequest(resources=resources),
            )
        finally:
            await client.close()
        names = {s.name for s in server.manager.subscriptions}
    assert isinstance(validated, IncrementalAlterConfigsResponse)
    assert [r.error_code for r in validated.responses] == [0, 0, 0, 0]
    assert validated.throttle_time_ms == 0
    assert isinstance(altered, IncrementalAlterConfigsResponse)
    codes = [r.error_code for r in altered.responses]
    # Strict: a bucket with any token left admits; in deficit, the rest are refused.
    assert codes == [0, 0, 89, 89]
    assert altered.throttle_time_ms > 0
    assert names == {"base", "s0", "s1"}


async def test_sighup_reapplies_the_file_under_the_dynamic_layer(tmp_path: Path) -> None:
    async with running(tmp_path, STATIC) as server:
        await with_admin(
            server,
            lambda admin: admin.alter_configs(
                [subscription("base", {"interval.ms": "1000"})], incremental=True
            ),
        )
        assert server.settings.config_path is not None
        server.settings.config_path.write_text(
            '[subscriptions.base]\nmetrics = ["org.apache.kafka.consumer."]\n'
            '"interval.ms" = 30000\n'
        )
        server.reload_config()
        base = server.manager.subscriptions.get("base")
    assert base is not None
    # The file's new metrics, the dynamic interval still on top.
    assert (base.metrics, base.interval_ms) == (("org.apache.kafka.consumer.",), 1000)


async def test_push_quota_change_keeps_a_throttled_client_throttled(tmp_path: Path) -> None:
    payload = otlp_payload("org.apache.kafka.producer.quota", points=40)
    config = (
        '[subscriptions.all]\nmetrics = ["*"]\n"interval.ms" = 100\n'
        f'[[quotas.clients]]\nclient_id = "heavy"\npush_byte_rate = {len(payload) * 100}\n'
    )
    async with running(tmp_path, config) as server:
        client = await WireClient.connect(*kafka_address(server), "heavy")
        try:
            answer = await client.subscribe()
            before = []
            for _ in range(3):
                await asyncio.sleep(0.12)
                pushed = await client.push(
                    answer.client_instance_id, answer.subscription_id, payload
                )
                before.append(pushed.throttle_time_ms)
            # 3P used so far; P/10 per second now: one more push alone would be within it.
            altered = await admin_call(
                client,
                AdminApiKey.ALTER_CLIENT_QUOTAS,
                1,
                AlterClientQuotasRequest(
                    entries=(
                        AlterClientQuotasEntry(
                            entity=(EntityData(entity_type="client-id", entity_name="heavy"),),
                            ops=(QuotaOp(key="push_byte_rate", value=float(len(payload) // 10)),),
                        ),
                    )
                ),
            )
            await asyncio.sleep(0.12)
            after = await client.push(answer.client_instance_id, answer.subscription_id, payload)
        finally:
            await client.close()
    assert before == [0, 0, 0]
    assert isinstance(altered, AlterClientQuotasResponse)
    assert [e.error_code for e in altered.entries] == [0]
    assert after.error_code == ErrorCode.NONE
    assert after.throttle_time_ms > 10_000  # the usage recorded before the change still counts
