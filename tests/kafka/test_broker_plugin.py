"""A real Kafka 4.4 broker with the kip714 plugin: its clients' telemetry lands in kip714's Parquet.

The clients (confluent-kafka) know only the broker: they produce and consume
real records there and push telemetry to it; the broker applies its own
client-metrics subscriptions (set with Kafka's ``kafka-client-metrics``
tool) and the plugin forwards each accepted push to kip714.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, Producer

from tests.kafka.kafka_dist import KafkaBroker, free_port
from tests.kafka.plugin_support import (
    KIP714_CONFIG,
    assert_forwarded_pushes_landed_once,
    landed_rows,
    plugin_properties,
    subscribe,
)
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path


class Clients:
    """A producer and a consumer of topic ``orders`` on the broker, driven from this thread."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        common: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "enable.sparse.connections": False,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
        }
        self.producer = Producer({**common, "client.id": f"{prefix}-producer", "linger.ms": 5})
        self.consumer = Consumer(
            {
                **common,
                "client.id": f"{prefix}-consumer",
                "group.id": f"{prefix}-group",
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.subscribe(["orders"])
        self.produced = 0
        self.consumed: set[bytes] = set()

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.producer.produce("orders", value=b"order-%d" % self.produced)
            self.produced += 1
            self.producer.poll(0)
            self._consume(0.05)

    def _consume(self, timeout_s: float) -> None:
        message = self.consumer.poll(timeout_s)
        if message is not None and message.error() is None:
            value = message.value()
            assert value is not None
            self.consumed.add(value)

    def close(self) -> None:
        """Deliver everything, read it back, then close (the consumer's terminating push)."""
        assert self.producer.flush(20) == 0
        deadline = time.monotonic() + 30
        while len(self.consumed) < self.produced and time.monotonic() < deadline:
            self._consume(0.1)
        self.consumer.close()
        self.producer.flush(5)


def test_clients_of_a_real_broker_land_their_telemetry_once_with_the_brokers_context(
    tmp_path: Path, kafka_jars: Path, broker_plugin_jar: Path
) -> None:
    kip714 = ServeProcess(tmp_path / "kip714", KIP714_CONFIG).start()
    broker = KafkaBroker(
        tmp_path / "broker", kafka_jars, broker_plugin_jar, plugin_properties(kip714)
    )
    try:
        broker.start()
        subscribe(broker, "org.apache.kafka.producer.", 1000)
        clients = Clients(broker.bootstrap, "e2e")
        clients.run(6)
        switched = time.time()
        subscribe(broker, "org.apache.kafka.consumer.", 1000)
        clients.run(6)
        clients.close()
        assert clients.produced > 0
        assert len(clients.consumed) == clients.produced, "every record produced is consumed"
        assert broker.stop()
        counters = broker.forwarder_counters()
    finally:
        broker.kill()
        assert kip714.stop() == 0

    rows = assert_forwarded_pushes_landed_once(counters, tmp_path / "kip714")
    for row in rows:
        assert dict(row["resource_attributes"])["kafka.broker.listener"] == "PLAINTEXT"
        assert row["client_id"] in {"e2e-producer", "e2e-consumer"}
        assert row["client_software_name"] == "confluent-kafka-python"
        assert row["client_source_address"] == "127.0.0.1"
        assert row["principal"] == "User:ANONYMOUS"

    # The subscription set with kafka-client-metrics decides what is pushed.
    before = {r["metric_name"] for r in rows if r["received_time"].timestamp() < switched}
    # A client learns the new subscription at its next push (UNKNOWN_SUBSCRIPTION_ID, then
    # GetTelemetrySubscriptions): a second or two, more on a loaded machine.
    late = {r["metric_name"] for r in rows if r["received_time"].timestamp() > switched + 6}
    assert before, "the producer pushed under the first subscription"
    assert all(name.startswith("org.apache.kafka.producer.") for name in before)
    assert late, "the consumer pushed under the altered subscription"
    assert all(name.startswith("org.apache.kafka.consumer.") for name in late)
    assert any(r["terminating"] and r["client_id"] == "e2e-consumer" for r in rows)


def test_kip714_down_for_ten_seconds_loses_only_what_the_plugin_counted_as_dropped(
    tmp_path: Path, kafka_jars: Path, broker_plugin_jar: Path
) -> None:
    http_listen = f"127.0.0.1:{free_port()}"
    kip714 = ServeProcess(tmp_path / "kip714", KIP714_CONFIG, http_listen=http_listen).start()
    broker = KafkaBroker(
        tmp_path / "broker",
        kafka_jars,
        broker_plugin_jar,
        # A tiny queue, so the outage overflows it within seconds.
        plugin_properties(kip714, kip714_queue_max_pushes="3", kip714_retry_backoff_max_ms="500"),
    )
    try:
        broker.start()
        subscribe(broker, "*", 200)
        clients = Clients(broker.bootstrap, "outage")
        clients.run(4)
        assert kip714.stop() == 0
        clients.run(10)
        kip714.start()
        clients.run(5)
        clients.close()
        assert broker.stop()
        counters = broker.forwarder_counters()
    finally:
        broker.kill()
        assert kip714.stop() == 0

    landed = len({row["push_offset"] for row in landed_rows(tmp_path / "kip714")})
    assert counters["dropped"] > 0, "the outage overflowed the queue"
    assert counters["rejected"] == 0
    assert counters["forwarded"] + counters["dropped"] == counters["received"]
    # Nothing is lost beyond the counted drops; a push whose answer the outage
    # cut off may land twice (the plugin retries), never more than received.
    assert counters["received"] - counters["dropped"] <= landed <= counters["received"]
