"""Session fixtures: Kafka's jars (fetched once through Maven) and the broker plugin jar."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.kafka import kafka_dist

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="session")
def kafka_jars() -> Path:
    return kafka_dist.kafka_jars()


@pytest.fixture(scope="session")
def broker_plugin_jar() -> Path:
    return kafka_dist.plugin_jar()
