"""Session fixtures: Kafka's jars (fetched once through Maven) and the broker plugin jar."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

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
    """One plain broker for a module's tests (a start costs half a minute here)."""
    broker = KafkaBroker(tmp_path_factory.mktemp("broker"), kafka_jars, broker_plugin_jar, {})
    try:
        yield broker.start()
        assert broker.stop()
    finally:
        broker.kill()
