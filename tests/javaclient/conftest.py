"""Session fixture: the Java telemetry driver, compiled against the cached kafka-clients jar."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.kafka import kafka_dist

DRIVER_SOURCE = Path(__file__).with_name("TelemetryProbe.java")
COMPILE_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def probe_class_path(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The driver's class directory and Kafka's jars (fetched once through Maven)."""
    jars = kafka_dist.kafka_jars()
    classes = tmp_path_factory.mktemp("probe-classes")
    [client_jar] = jars.glob(f"kafka-clients-{kafka_dist.KAFKA_VERSION}.jar")
    result = subprocess.run(
        ["javac", "-Xlint:all", "-Werror", "-d", str(classes), "-cp", str(client_jar),
         str(DRIVER_SOURCE)],
        check=False,
        timeout=COMPILE_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, f"javac failed:\n{result.stdout}{result.stderr}"
    return [classes, jars / "*"]
