"""Three ``kip714 serve`` nodes share one metadata image through a topic of a real Kafka broker.

One broker and three nodes for the module (a broker start costs half a
minute here); every test names entities of its own, and the broker restart
runs last.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.cimpl import NewTopic

from telemetry.errors import ErrorCode
from telemetry.metastore import (
    ClientQuotaRecord,
    ConfigRecord,
    MetadataRecord,
    MetadataStore,
    MetadataStoreClosedError,
    MetadataStoreError,
)
from telemetry.metastore.entities import ConfigEntity, QuotaEntityKey, encode_key
from telemetry.metastore.kafka_log import KafkaMetadataLog
from telemetry.metastore.records import encode_batch
from telemetry.metastore.settings import parse_meta
from tests.kafka.kafka_dist import KafkaBroker
from tests.telemetry.admin.admin_support import admin_client, subscription
from tests.telemetry.kafka_wire_client import WireClient, fresh_push
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from telemetry.wire import PushTelemetryResponse

TOPIC = "_kip714_metadata_test"
NODE_CONFIG = """
[subscriptions.base]
metrics = ["org.apache.kafka.producer."]
"interval.ms" = 60000
[exporters.landing]
enabled = false
[exporters.lines]
type = "jsonl"
[security]
sasl_mechanisms = ["SCRAM-SHA-256"]
allow_anonymous = true
super_users = ["User:ANONYMOUS"]
[meta]
store = "kafka"
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
startup_timeout_s = 30
"""
#: The promise under test: a change made on one node is in force on the others within this.
PROPAGATION_S = 2.0
HTTP_TIMEOUT_S = 45.0  # longer than a change may wait for the cluster (30 s)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory, broker: KafkaBroker) -> Iterator[list[Node]]:
    root = tmp_path_factory.mktemp("nodes")
    config = NODE_CONFIG.format(bootstrap=broker.bootstrap, topic=TOPIC)
    started: list[Node] = []
    try:
        for index in (1, 2, 3):
            started.append(Node(ServeProcess(root / f"node{index}", config).start()))
        yield started
        for node in started:
            assert node.process.stop() == 0
    finally:
        for node in started:
            node.process.kill()


class Node:
    """A running node and its HTTP admin API."""

    def __init__(self, process: ServeProcess) -> None:
        self.process = process

    def http(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        host, port = self.process.http
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{host}:{port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def metadata(self) -> dict[str, Any]:
        status, body = self.http("GET", "/admin/metadata")
        assert status == 200, body
        assert isinstance(body, dict)
        return body

    def set_quota(self, client_id: str, rate: float) -> int:
        status, _ = self.http(
            "POST",
            "/admin/quotas",
            {"entity": {"client-id": client_id}, "set": {"push_byte_rate": rate}},
        )
        return status

    def metrics(self) -> str:
        host, port = self.process.http
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
            text: str = response.read().decode()
            return text


def sasl_count(node: Node, result: str) -> float:
    prefix = f'kip714_kafka_sasl_authentications_total{{result="{result}"}} '
    [line] = [line for line in node.metrics().splitlines() if line.startswith(prefix)]
    return float(line.removeprefix(prefix))


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``condition`` (bounded); the seconds it took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"not within {timeout_s} s: {what}"
        time.sleep(0.02)
    return time.monotonic() - started


def quota_records(node: Node) -> dict[str, float]:
    return {
        record["entity"]["client-id"]: record["value"]
        for record in node.metadata()["records"]
        if record["type"] == "client_quota" and "client-id" in record["entity"]
    }


def converge(nodes: list[Node], timeout_s: float) -> dict[str, Any]:
    """Wait until every node holds the same records at the same offset; that image."""
    images: list[dict[str, Any]] = []

    def same() -> bool:
        images[:] = [node.metadata() for node in nodes]
        return all(
            (i["next_offset"], i["records"]) == (images[0]["next_offset"], images[0]["records"])
            for i in images
        )

    wait_for(same, timeout_s, "the nodes converge on one image")
    return images[0]


class Writer(threading.Thread):
    """Quota changes through the nodes' HTTP admin APIs in turn, one at a time."""

    def __init__(self, nodes: list[Node], prefix: str, entities: int | None) -> None:
        super().__init__(daemon=True)
        self.nodes = nodes
        self.prefix = prefix
        self.entities = entities
        self.acknowledged: list[tuple[str, float]] = []
        #: Which node (its index in ``nodes``) acknowledged each change.
        self.acknowledged_by: list[int] = []
        self.sent: list[tuple[str, float]] = []
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        index = 0
        while not self.stopping.is_set() and index < 5000:
            node = self.nodes[index % len(self.nodes)]
            slot = index if self.entities is None else index % self.entities
            change = (f"{self.prefix}-{slot}", float(1000 + index))
            self.sent.append(change)
            try:
                status = node.set_quota(*change)
            except OSError:  # a node being killed or restarted
                status = 0
            if status == 200:
                self.acknowledged.append(change)
                self.acknowledged_by.append(index % len(self.nodes))
            else:
                self.failures += 1
                time.sleep(0.05)
            index += 1

    def finish(self) -> None:
        self.stopping.set()
        self.join(HTTP_TIMEOUT_S + 5)
        assert not self.is_alive()


async def push_once(node: Node, client_id: str) -> PushTelemetryResponse:
    """A fresh client instance of ``client_id``: GET, then one push."""
    return await fresh_push(node.process.kafka, client_id, points=40)


async def test_alter_configs_through_node_1_is_what_a_client_of_node_3_gets_next(
    nodes: list[Node],
) -> None:
    first, _, third = nodes
    client = await WireClient.connect(*third.process.kafka, "meta-app")
    try:
        before = await client.subscribe()
        assert before.requested_metrics == ("org.apache.kafka.producer.",)
        admin = admin_client(*first.process.kafka)
        try:
            altered = await asyncio.to_thread(
                admin.alter_configs,
                [
                    subscription(
                        "base", {"metrics": "org.apache.kafka.consumer.", "interval.ms": "1000"}
                    )
                ],
                incremental=True,
            )
        finally:
            admin.close()
        assert altered == {"client_metrics": {"base": "OK"}}
        acknowledged = time.monotonic()
        while True:
            got = await client.get_subscriptions(before.client_instance_id)
            if got.error_code == ErrorCode.NONE:
                break
            assert got.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED  # the old one, too soon
            assert time.monotonic() - acknowledged < PROPAGATION_S, "node 3 still has the old one"
            await asyncio.sleep(0.02)
    finally:
        await client.close()
    assert got.requested_metrics == ("org.apache.kafka.consumer.",)
    assert got.push_interval_ms == 1000
    assert got.subscription_id != before.subscription_id


async def test_a_quota_set_through_node_2s_http_api_throttles_a_client_of_node_1(
    nodes: list[Node],
) -> None:
    first, second, _ = nodes
    unthrottled = await push_once(first, "meter")
    assert (unthrottled.error_code, unthrottled.throttle_time_ms) == (ErrorCode.NONE, 0)
    assert await asyncio.to_thread(second.set_quota, "meter", 1.0) == 200
    took = await asyncio.to_thread(
        wait_for,
        lambda: quota_records(first).get("meter") == 1.0,
        PROPAGATION_S,
        "node 1 applies the quota",
    )
    throttled = await push_once(first, "meter")
    assert throttled.error_code == ErrorCode.NONE  # over its quota: accepted, then throttled
    assert throttled.throttle_time_ms > 0
    assert took < PROPAGATION_S
    metrics = await asyncio.to_thread(first.metrics)
    assert "kip714_metadata_log_lag_records 0.0" in metrics
    assert "kip714_metadata_log_apply_delay_seconds" in metrics


def test_a_scram_user_created_through_node_3_logs_in_on_node_1(nodes: list[Node]) -> None:
    first, _, third = nodes
    admin = AdminClient({"bootstrap.servers": third.process.bootstrap})
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-pw"
            )
        ],
        request_timeout=30,
    )
    for future in futures.values():
        assert future.result(30) is None
    del admin
    wait_for(
        lambda: any(r["type"] == "scram_credential" for r in first.metadata()["records"]),
        PROPAGATION_S,
        "node 1 applies the credential",
    )
    producer = Producer(
        {
            "bootstrap.servers": first.process.bootstrap,
            "client.id": "carol-app",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "carol",
            "sasl.password": "carol-pw",
            "enable.sparse.connections": False,
        }
    )

    def authenticated() -> bool:
        producer.poll(0.05)
        return sasl_count(first, "authenticated") >= 1

    try:
        wait_for(authenticated, 15, "carol authenticates on node 1")
    finally:
        producer.flush(1)
    assert sasl_count(first, "failed") == 0


def test_a_message_kip714_cannot_read_is_skipped_alike_on_every_node(
    nodes: list[Node], broker: KafkaBroker
) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    producer.produce(TOPIC, key=b'["quota",[["user"]]]', value=b"junk", partition=0)
    producer.produce(TOPIC, key=b'["config",16,"base"]', value=b"\x00" * 20, partition=0)
    assert producer.flush(30) == 0
    assert nodes[0].set_quota("after-junk", 7.0) == 200
    image = converge(nodes, 10)
    assert {"type": "client_quota", "entity": {"client-id": "after-junk"},
            "key": "push_byte_rate", "value": 7.0} in image["records"]  # fmt: skip
    for node in nodes:
        assert "kip714_metadata_log_skipped_records_total 2.0" in node.metrics()


def skipped_records(node: Node) -> float:
    prefix = "kip714_metadata_log_skipped_records_total "
    [line] = [line for line in node.metrics().splitlines() if line.startswith(prefix)]
    return float(line.removeprefix(prefix))


def test_messages_the_admin_api_would_refuse_are_skipped_and_nodes_follow_and_start(
    nodes: list[Node], broker: KafkaBroker, tmp_path: Path
) -> None:
    before = [skipped_records(node) for node in nodes]
    nan = ClientQuotaRecord(
        entity=(("client-id", "nan-app"),), key="push_byte_rate", value=math.nan
    )
    negative = tuple(
        ConfigRecord(resource_type=16, resource_name="negative", name=key, value=value)
        for key, value in (("interval.ms", "-5"), ("metrics", "*"))
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    producer.produce(TOPIC, key=b"[" * 50_000, value=b"junk", partition=0)
    producer.produce(
        TOPIC,
        key=encode_key(QuotaEntityKey(nan.entity)),
        value=encode_batch(0, (nan,)),
        partition=0,
    )
    producer.produce(
        TOPIC,
        key=encode_key(ConfigEntity(16, "negative")),
        value=encode_batch(0, negative),
        partition=0,
    )
    assert producer.flush(30) == 0
    # A node that stopped following would answer its own change with 500.
    assert nodes[0].set_quota("after-untrusted", 9.0) == 200
    image = converge(nodes, 10)
    quotas = quota_records(nodes[0])
    assert quotas["after-untrusted"] == 9.0
    assert "nan-app" not in quotas
    assert not [r for r in image["records"] if r.get("name") == "negative"]
    for node, skipped in zip(nodes, before, strict=True):
        assert skipped_records(node) == skipped + 3
    # A node that starts now reads the three messages, skips them and serves.
    config = NODE_CONFIG.format(bootstrap=broker.bootstrap, topic=TOPIC)
    fresh = Node(ServeProcess(tmp_path / "node4", config).start())
    try:
        assert quota_records(fresh)["after-untrusted"] == 9.0
        assert skipped_records(fresh) >= 3
        assert fresh.process.stop() == 0
    finally:
        fresh.process.kill()


def test_a_node_killed_while_changes_flow_converges_on_restart(nodes: list[Node]) -> None:
    first, second, third = nodes
    writer = Writer([first, second], "flow", entities=6)
    writer.start()
    wait_for(lambda: len(writer.acknowledged) >= 10, 20, "changes flow")
    second.process.kill()  # SIGKILL
    wait_for(lambda: writer.failures >= 1, 20, "a change fails on the killed node")
    second.process.start()  # reads the topic to its end before it serves
    restarted = len(writer.acknowledged_by)
    wait_for(
        lambda: writer.acknowledged_by[restarted:].count(1) >= 5,
        30,
        "the restarted node takes changes again",
    )
    writer.finish()
    image = converge([first, second, third], 10)

    final = {
        record["entity"]["client-id"]: record["value"]
        for record in image["records"]
        if record["type"] == "client_quota" and record["entity"]["client-id"].startswith("flow-")
    }
    # One writer, one change at a time: the topic has them in the order sent. An
    # entity ends at its last acknowledged value, or at a later one whose answer
    # the kill cut off.
    last_acknowledged = dict(writer.acknowledged)
    for entity, value in last_acknowledged.items():
        later = [v for e, v in writer.sent if e == entity and v >= value]
        assert final[entity] in later, (entity, final[entity], value)
    assert writer.failures >= 1


def test_migrate_copies_a_local_store_into_the_topic(tmp_path: Path, broker: KafkaBroker) -> None:
    local: list[MetadataRecord] = [
        ConfigRecord(resource_type=16, resource_name="old", name="metrics", value="*"),
        ConfigRecord(resource_type=16, resource_name="old", name="interval.ms", value="5000"),
        ClientQuotaRecord(entity=(("user", None),), key="push_byte_rate", value=4096.0),
        ClientQuotaRecord(entity=(("ip", "10.0.0.1"),), key="connection_creation_rate", value=3),
    ]
    with MetadataStore.open(tmp_path / "data") as store:
        store.append(local)
        image = store.image
    config = tmp_path / "migrate.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[meta]\nstore = "kafka"\n'
        f'bootstrap_servers = "{broker.bootstrap}"\ntopic = "migrated"\n'
    )

    def migrate(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "telemetry", "meta", "migrate", "--to-kafka",
             "--config", str(config), *extra],
            capture_output=True, text=True, timeout=90, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    first = migrate()
    again = migrate()
    forced = migrate("--force")
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout.startswith("copied 4 records (3 entities) from ")
    assert again.returncode == 1
    assert "already holds 4 records; --force" in again.stderr
    assert forced.returncode == 0
    settings = parse_meta(
        {"store": "kafka", "bootstrap_servers": broker.bootstrap, "topic": "migrated"}
    )
    reader = KafkaMetadataLog.open(settings)
    try:
        assert reader.image == image
        assert reader.next_offset == 6  # three entities, written twice
    finally:
        reader.close()


def test_a_topic_that_could_lose_or_reorder_changes_is_refused(broker: KafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    created = admin.create_topics(
        [
            NewTopic("meta-expiring", num_partitions=1, replication_factor=1),
            NewTopic("meta-split", 3, 1, config={"cleanup.policy": "compact"}),
        ],
        request_timeout=30,
    )
    for future in created.values():
        assert future.result(30) is None
    del admin
    refusals = {}
    for topic in ("meta-expiring", "meta-split"):
        settings = parse_meta(
            {"store": "kafka", "bootstrap_servers": broker.bootstrap, "topic": topic}
        )
        with pytest.raises(MetadataStoreError) as refused:
            KafkaMetadataLog.open(settings)
        refusals[topic] = str(refused.value)
    assert refusals == {
        "meta-expiring": f"topic meta-expiring at {broker.bootstrap} has cleanup.policy=delete: "
        "changes would expire with its retention; it needs cleanup.policy=compact",
        "meta-split": f"topic meta-split at {broker.bootstrap} has 3 partitions: one partition "
        "keeps every change in one order",
    }


def test_a_failing_watcher_is_logged_and_the_log_goes_on(
    broker: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    settings = parse_meta(
        {"store": "kafka", "bootstrap_servers": broker.bootstrap, "topic": "meta-watchers"}
    )
    log = KafkaMetadataLog.open(settings)
    calls: list[int] = []

    def failing() -> None:
        calls.append(log.next_offset)
        raise RuntimeError("a watcher's own bug")

    log.watch(failing)
    try:
        for rate in (1.0, 2.0):
            log.append(
                [ClientQuotaRecord(entity=(("user", "w"),), key="push_byte_rate", value=rate)]
            )
    finally:
        log.close()  # joins the consumer thread: every watcher call is done
    assert calls == [1, 2]
    assert log.image.client_quotas == {(("user", "w"),): {"push_byte_rate": 2.0}}
    failures = [r for r in caplog.records if r.getMessage() == "a metadata log watcher failed"]
    assert len(failures) == 2
    assert all(r.exc_info is not None and r.exc_info[0] is RuntimeError for r in failures)


def test_the_broker_restarted_under_load_loses_no_acknowledged_change(
    nodes: list[Node], broker: KafkaBroker
) -> None:
    settings = parse_meta({"store": "kafka", "bootstrap_servers": broker.bootstrap, "topic": TOPIC})
    observer = KafkaMetadataLog.open(settings)
    writer = Writer(nodes, "load", entities=None)
    writer.start()
    wait_for(lambda: len(writer.acknowledged) >= 10, 20, "changes flow")
    assert broker.stop()
    # A change waiting for the cluster when its node closes fails at once.
    outcome: list[BaseException | None] = []

    def pending_append() -> None:
        try:
            observer.append(
                [
                    ClientQuotaRecord(
                        entity=(("client-id", "orphan"),), key="push_byte_rate", value=1.0
                    )
                ]
            )
        except BaseException as error:
            outcome.append(error)
        else:
            outcome.append(None)

    appending = threading.Thread(target=pending_append)
    appending.start()
    time.sleep(0.3)
    observer.close()
    appending.join(15)
    assert not appending.is_alive()
    assert isinstance(outcome[0], MetadataStoreClosedError)

    # A node stopped while its change waits for the cluster answers it with an
    # error and exits cleanly (ServeProcess.stop bounds the wait at 20 s).
    third = nodes[2]
    answers: list[object] = []

    def change_during_outage() -> None:
        try:
            answers.append(third.set_quota("outage", 5.0))
        except OSError as error:  # the connection closed by the stopping node
            answers.append(error)

    changing = threading.Thread(target=change_during_outage)
    changing.start()
    time.sleep(0.5)
    assert third.process.stop() == 0
    changing.join(15)
    assert not changing.is_alive()
    assert answers[0] == 500 or isinstance(answers[0], OSError), answers

    acknowledged_before = len(writer.acknowledged)
    broker.start()
    third.process.start()
    flowing = lambda: len(writer.acknowledged) >= acknowledged_before + 20  # noqa: E731
    wait_for(flowing, 120, "changes flow again")  # a broker restart on a loaded machine
    writer.finish()
    image = converge(nodes, 15)
    landed = {
        (record["entity"]["client-id"], record["value"])
        for record in image["records"]
        if record["type"] == "client_quota" and record["entity"]["client-id"].startswith("load-")
    }
    lost = set(writer.acknowledged) - landed
    assert not lost, f"{len(lost)} acknowledged changes lost: {sorted(lost)[:5]}"
    assert len(writer.acknowledged) >= 30
