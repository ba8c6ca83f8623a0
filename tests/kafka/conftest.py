"""Session fixtures: Kafka's jars (fetched once through Maven) and the broker plugin jar."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer

from tests.kafka import kafka_dist
from tests.kafka.kafka_dist import KafkaBroker

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="session")
def kafka_jars() -> Path:
    return kafka_dist.kafka_jars()


@pytest.fixture(scope="session")
def broker_plugin_jar() -> Path:
    return kafka_dist.plugin_jar()


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, kafka_jars: Path, broker_plugin_jar: Path
) -> Iterator[KafkaBroker]:
    """One plain broker for a module's tests (a start costs half a minute here).

    Handed over once an idempotent producer got its producer id: until the broker's
    coordinators have loaded, librdkafka logs "Coordinator load in progress: retrying", which a
    command under test would print as if something were wrong.
    """
    broker = KafkaBroker(tmp_path_factory.mktemp("broker"), kafka_jars, broker_plugin_jar, {})
    try:
        broker.start()
        _wait_for_producer_ids(broker)
        yield broker
        assert broker.stop()
    finally:
        broker.kill()


def _wait_for_producer_ids(broker: KafkaBroker) -> None:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "log_level": 0}
    )
    producer.produce("kip714-test-ready", b"ready")
    assert producer.flush(60) == 0, "an idempotent produce did not complete within 60 s"
