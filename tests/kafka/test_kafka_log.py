"""``[log] store = "kafka"``: pushes acknowledged by a real broker, exported by consumer groups.

One broker for the module (a broker start costs half a minute here); each
test runs its own ``kip714 serve`` nodes on a topic of its own, and the
broker's stop and restart runs last.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import zstandard
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType

from telemetry.core.codecs import CompressionType
from telemetry.errors import ErrorCode
from telemetry.ingest import LogFullError
from telemetry.ingest.config import parse_log
from telemetry.ingest.kafka_log import KafkaPushLog, decode_record
from tests.kafka.kafka_dist import KafkaBroker
from tests.telemetry.ingest.support import context, encoded_frame
from tests.telemetry.kafka_wire_client import WireClient, fresh_push
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from collections.abc import Callable

    from exporters.api import LoggedPush
    from telemetry.wire import PushTelemetryResponse

NODE_CONFIG = """
[subscriptions.base]
metrics = ["org.apache.kafka.producer."]
"interval.ms" = 60000
[exporters.landing]
enabled = false
{exporters}
[log]
store = "kafka"
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
startup_timeout_s = 30
full_throttle_ms = 700
"""
LINES = '[exporters.lines]\ntype = "jsonl"\n'
#: A record declaring this many bytes decompressed, over the default max_record_bytes.
BOMB_BYTES = 64 << 20
#: A generous bound for what must happen "soon" (a rebalance takes up to the session timeout).
SOON_S = 60.0


def node(
    root: Path, name: str, broker: KafkaBroker, topic: str, exporters: str = LINES
) -> ServeProcess:
    config = NODE_CONFIG.format(bootstrap=broker.bootstrap, topic=topic, exporters=exporters)
    return ServeProcess(root / name, config)


def peak_rss(pid: int) -> int:
    """The process's peak resident set (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


def http_get(process: ServeProcess, path: str) -> tuple[int, str]:
    host, port = process.http
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def metric(process: ServeProcess, name: str) -> float:
    """The sum of every series of ``name`` (0 when absent)."""
    _, text = http_get(process, "/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and re.match(rf"{re.escape(name)}(\{{| )", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


async def push_as(process: ServeProcess, client_id: str) -> PushTelemetryResponse:
    """A fresh client instance of ``client_id``: GET, then one push of one data point."""
    return await fresh_push(process.kafka, client_id)


async def subscribes(process: ServeProcess) -> bool:
    """Liveness: a new client is still answered its subscription."""
    client = await WireClient.connect(*process.kafka, "liveness")
    try:
        return (await client.subscribe()).error_code == ErrorCode.NONE
    finally:
        await client.close()


def _end_offset(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's end; retried while a restarted broker elects its leaders (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            end: int = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1]
        except KafkaException as error:
            if error.args[0].code() != KafkaError.NOT_LEADER_FOR_PARTITION:
                raise
            assert time.monotonic() < deadline, f"no leader for {topic}-{partition}"
            time.sleep(0.2)
        else:
            return end


def topic_records(broker: KafkaBroker, topic: str) -> list[LoggedPush]:
    """Every record of ``topic``, decoded (bounded: test topics are small)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kip714-test-reader"})
    try:
        ends = {p: _end_offset(consumer, topic, p) for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pushes: list[LoggedPush] = []
        positions = dict.fromkeys(partitions, 0)
        deadline = time.monotonic() + 30
        while any(positions[p] < ends[p] for p in partitions):
            assert time.monotonic() < deadline, (positions, ends)
            for message in consumer.consume(500, 0.5):
                if message.error() is not None:
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                positions[partition] = offset + 1
                pushes.append(decode_record(message.value(), partition, offset))
        return pushes
    finally:
        consumer.close()


def kip714_log(process: ServeProcess, *args: str) -> subprocess.CompletedProcess[str]:
    assert process.config_path is not None
    return subprocess.run(
        [
            sys.executable, "-m", "telemetry", "log", *args,
            "--config", str(process.config_path), "--data-dir", str(process.data_dir),
        ],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def exported_client_ids(process: ServeProcess) -> list[str]:
    """The ``client_id`` of every row the jsonl exporter wrote (one data point per push)."""
    path = process.data_dir / "jsonl" / "lines.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return [row["client_id"] for row in rows]


def test_the_topic_is_created_at_start_keyed_by_instance_and_exported(
    tmp_path: Path, broker: KafkaBroker
) -> None:
    topic = "pushes-basic"
    process = node(tmp_path, "a", broker, topic).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.list_topics(topic, timeout=10).topics[topic]
        assert len(described.partitions) == 12
        [configs] = [
            f.result(10)
            for f in admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
        ]
        assert configs["min.insync.replicas"].value == "1"  # min(2, replication 1)

        answers = [asyncio.run(push_as(process, f"basic-{n}")) for n in range(20)]
        assert [a.error_code for a in answers] == [ErrorCode.NONE] * 20
        records = topic_records(broker, topic)
        assert sorted(r.client_id or "" for r in records) == sorted(f"basic-{n}" for n in range(20))
        assert len({r.partition for r in records}) > 1  # instances spread over partitions
        wait_for(
            lambda: sorted(exported_client_ids(process)) == sorted(f"basic-{n}" for n in range(20)),
            SOON_S,
            "the jsonl exporter, a member of its group, exports every push once",
        )
        assert metric(process, "kip714_log_ack_seconds_count") == 20
        wait_for(
            lambda: metric(process, "kip714_log_group_lag_records") == 0,
            SOON_S,
            "the group's lag per partition comes down to 0",
        )
        status = kip714_log(process, "status", "--json")
        assert status.returncode == 0, status.stderr
        document = json.loads(status.stdout)
        assert len(document["partitions"]) == 12
        lines = document["exporters"]["lines"]
        assert (lines["group"], lines["lag"]) == ("kip714-lines-kip714", 0)
        assert sum(p["committed"] or 0 for p in lines["partitions"].values()) == 20
        text = kip714_log(process, "status")
        assert "exporter lines (group kip714-lines-kip714): lag 0" in text.stdout
        skip = kip714_log(process, "skip", "--exporter", "lines", "--to", "0")
        assert skip.returncode == 2
        [line] = skip.stderr.splitlines()
        assert "kafka-consumer-groups.sh --reset-offsets" in line
    finally:
        assert process.stop() == 0
    assert any("left group kip714-lines-kip714" in line for line in process.lines), process.lines[
        -5:
    ]


def test_a_record_that_does_not_decode_is_counted_named_and_skipped(
    tmp_path: Path, broker: KafkaBroker
) -> None:
    topic = "pushes-junk"
    process = node(tmp_path, "a", broker, topic).start()
    try:
        assert process.process is not None
        peak_before = peak_rss(process.process.pid)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for partition in range(12):
            producer.produce(topic, value=b"not a frame", partition=partition)
        # A well-formed frame declaring 64 MiB decompressed (a zstd bomb of 2 KiB), over
        # the node's max_record_bytes (16 MiB): refused before it is decompressed.
        bomb = zstandard.compress(bytes(BOMB_BYTES))
        producer.produce(
            topic, value=encoded_frame(0, context(0), bomb, CompressionType.ZSTD, BOMB_BYTES)
        )
        assert producer.flush(10) == 0
        answers = [asyncio.run(push_as(process, f"after-junk-{n}")) for n in range(5)]
        assert [a.error_code for a in answers] == [ErrorCode.NONE] * 5
        wait_for(
            lambda: (
                sorted(exported_client_ids(process)) == sorted(f"after-junk-{n}" for n in range(5))
            ),
            SOON_S,
            "the pushes after the junk are exported",
        )
        assert metric(process, "kip714_log_undecodable_records_total") == 13
        assert asyncio.run(subscribes(process))
        grown = peak_rss(process.process.pid) - peak_before
        assert grown < BOMB_BYTES // 2, f"peak RSS grew {grown} bytes"
    finally:
        assert process.stop() == 0
    named = [line for line in process.lines if "it does not decode" in line]
    assert len(named) == 13, named
    assert sum("over 16777216" in line for line in named) == 1


def test_a_node_killed_and_its_disk_lost_loses_no_acknowledged_push(
    tmp_path: Path, broker: KafkaBroker
) -> None:
    """Node A acknowledges, then is SIGKILLed and its data dir deleted; B exports every push."""
    topic = "pushes-lost-node"
    first = node(tmp_path, "a", broker, topic, exporters="").start()
    acknowledged: list[str] = []
    try:
        for n in range(60):
            answer = asyncio.run(push_as(first, f"lost-{n}"))
            if answer.error_code == ErrorCode.NONE:
                acknowledged.append(f"lost-{n}")
    finally:
        first.kill()  # SIGKILL
    shutil.rmtree(first.data_dir)
    assert len(acknowledged) == 60
    second = node(tmp_path, "b", broker, topic).start()
    try:
        wait_for(
            lambda: len(exported_client_ids(second)) >= len(acknowledged),
            SOON_S,
            "node B exports what node A acknowledged",
        )
        time.sleep(1.0)  # a duplicate would show up by now
        assert sorted(exported_client_ids(second)) == sorted(acknowledged)
    finally:
        assert second.stop() == 0


class Load(threading.Thread):
    """Fresh client instances pushing round robin over the live nodes; what was acknowledged."""

    def __init__(self, nodes: list[ServeProcess]) -> None:
        super().__init__(daemon=True)
        self.nodes = nodes
        self.live = list(nodes)
        self.acknowledged: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        index = 0
        while not self.stopping.is_set() and index < 5000:
            target = self.live[index % len(self.live)]
            try:
                answer = asyncio.run(push_as(target, f"fleet-{index}"))
            except (OSError, EOFError):  # the node being killed (reset, or closed mid-answer)
                answer = None
            if answer is not None and answer.error_code == ErrorCode.NONE:
                self.acknowledged.append(f"fleet-{index}")
            index += 1

    def finish(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive()

    def finish_after(self, more: int, what: str) -> set[str]:
        """Wait for ``more`` acknowledgements from now, then stop; every one acknowledged."""
        now = len(self.acknowledged)
        wait_for(lambda: len(self.acknowledged) >= now + more, SOON_S, what)
        self.finish()
        return set(self.acknowledged)


def test_three_nodes_one_killed_under_load_every_acknowledged_push_is_exported(
    tmp_path: Path, broker: KafkaBroker
) -> None:
    """kill -9 of one of three nodes at a random moment (fixed seed): nothing acknowledged lost."""
    rng = random.Random(714)
    topic = "pushes-fleet"
    nodes = [node(tmp_path, name, broker, topic).start() for name in ("a", "b", "c")]
    load = Load(nodes)
    try:
        load.start()
        time.sleep(rng.uniform(1.0, 3.0))
        victim = rng.choice(nodes)
        load.live = [n for n in nodes if n is not victim]
        victim.kill()  # SIGKILL: its uncommitted batches go to the others
        acknowledged = load.finish_after(20, "the survivors acknowledge pushes")

        def exported() -> set[str]:
            return {client for n in nodes for client in exported_client_ids(n)}

        wait_for(
            lambda: acknowledged <= exported(),
            SOON_S,
            "every acknowledged push is exported by some node (the victim's partitions moved)",
        )
        survivors = load.live
        assert all(asyncio.run(subscribes(n)) for n in survivors)
    finally:
        load.stopping.set()
        for n in nodes:
            if n.process is not None and n.process.poll() is None:
                assert n.stop() == 0
            else:
                n.kill()


def test_the_topic_deleted_under_a_running_node_throttles_pushes_and_readiness_says_so(
    tmp_path: Path, broker: KafkaBroker
) -> None:
    topic = "pushes-deleted"
    process = node(tmp_path, "a", broker, topic, exporters="").start()
    try:
        assert asyncio.run(push_as(process, "before")).error_code == ErrorCode.NONE
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        [deleted] = admin.delete_topics([topic]).values()
        deleted.result(30)

        def unready() -> bool:
            status, body = http_get(process, "/readyz")
            return status == 503 and "pushes topic missing" in body

        wait_for(unready, SOON_S, "/readyz says the pushes topic is missing")
        answer = asyncio.run(push_as(process, "after"))
        assert answer.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert answer.throttle_time_ms == 700  # [log] full_throttle_ms
        assert asyncio.run(subscribes(process))
        assert topic not in admin.list_topics(timeout=10).topics  # not recreated while running
        assert (
            metric(
                process, 'kip714_requests_refused_total{door="kafka",reason="bootstrap_servers"}'
            )
            >= 1
        )
    finally:
        assert process.stop() == 0


class _PollFails:
    """The real producer, but its ``poll`` raises: what a bug in the poll thread does."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def poll(self, timeout: float) -> int:
        del timeout
        raise RuntimeError("injected: poll failed")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


def test_a_failed_producer_thread_is_logged_at_once_and_pushes_are_refused(
    broker: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_log(
        {"store": "kafka", "bootstrap_servers": broker.bootstrap, "topic": "pushes-poll-fails"}
    )

    async def scenario() -> str:
        log = await KafkaPushLog.open(config)
        try:
            log._thread.join(5.0)  # the real thread polls; stop it, then run one that fails
            log._stopping.set()
            log._thread.join(10.0)
            assert not log._thread.is_alive()
            log._stopping.clear()
            log._producer = _PollFails(log._producer)  # type: ignore[assignment]
            failing = threading.Thread(target=log._run, daemon=True)
            failing.start()
            failing.join(10.0)
            assert not failing.is_alive()  # the thread ended, and said why (below)
            with pytest.raises(LogFullError):
                log.append_nowait(context(1), b"push")
            return log.stats.last_refusal_reason
        finally:
            log._producer = log._producer._producer  # type: ignore[attr-defined]
            await log.close()

    with caplog.at_level(logging.ERROR, logger="telemetry.ingest.kafka_log"):
        reason = asyncio.run(scenario())
    assert "the producer thread failed: injected: poll failed" in reason
    assert any("producer thread failed" in r.getMessage() for r in caplog.records)


def test_a_broker_down_while_serving_throttles_pushes_until_it_is_back(
    tmp_path: Path, broker: KafkaBroker
) -> None:
    """Last: the broker stops and starts again."""
    topic = "pushes-broker-down"
    process = node(tmp_path, "a", broker, topic).start()
    stopped_while_down = node(tmp_path, "b", broker, topic).start()
    load = Load([process])  # pushes in flight when the broker goes
    try:
        assert asyncio.run(push_as(process, "up-1")).error_code == ErrorCode.NONE
        load.start()
        wait_for(lambda: len(load.acknowledged) >= 5, SOON_S, "pushes flow")
        assert broker.stop()
        # SIGTERM with the cluster away: the producer's and the group's goodbyes are bounded.
        assert stopped_while_down.stop(timeout_s=40) == 0

        def refused() -> bool:
            status, body = http_get(process, "/readyz")
            return status == 503 and "ingest log" in body

        wait_for(refused, SOON_S, "/readyz says the cluster cannot be reached")
        answer = asyncio.run(push_as(process, "down"))
        assert answer.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert answer.throttle_time_ms == 700
        assert asyncio.run(subscribes(process))
        load.finish()
        broker.start()
        wait_for(lambda: http_get(process, "/readyz")[0] == 200, SOON_S, "ready again")
        assert asyncio.run(push_as(process, "up-2")).error_code == ErrorCode.NONE
        acknowledged = {"up-1", "up-2", *load.acknowledged}
        # Nothing acknowledged that the cluster did not: every one is in the topic.
        in_topic = {push.client_id for push in topic_records(broker, topic)}
        assert acknowledged <= in_topic
        assert "down" not in in_topic

        def exported() -> set[str]:
            # At least once: a commit the outage cut off may export a push again.
            return set(exported_client_ids(process) + exported_client_ids(stopped_while_down))

        wait_for(lambda: acknowledged <= exported(), SOON_S, "every acknowledged push exported")
        assert exported() <= in_topic
    finally:
        load.stopping.set()
        stopped_while_down.kill()
        # Just after the broker's restart, the group may be rebalancing (b's session ends):
        # the drain, flush, final commit and leave each wait their bound, as b's stop does.
        assert process.stop(timeout_s=40) == 0
