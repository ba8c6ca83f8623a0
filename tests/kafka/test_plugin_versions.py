"""The plugin in every Kafka it claims: real KRaft brokers 3.7 to 4.4, one after another.

Each broker (its jars from Maven Central at that version, cached) runs the
plugin class its API takes (``Kip714Reporter`` before 4.2, KIP-1217's
``Kip714ExporterReporter`` from 4.2) with a librdkafka producer and
Apache Kafka's Java producer of the broker's own version pushing telemetry
to it. Every push the plugin counts forwarded (kip714 acknowledged it) must
land exactly once, from both clients, with the broker's id.

A 3.7 broker hands the plugin each payload still compressed (its
``PushTelemetryRequest.decompressMetricsData`` returns its input); kip714's
forward route decompresses it, so the same checks hold, and /metrics shows
those payloads arrived compressed while no other version's did.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
import time
import urllib.request
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer

from tests.kafka import kafka_dist
from tests.kafka.kafka_dist import KafkaBroker, java_command
from tests.kafka.plugin_support import (
    EXPORTER_REPORTER,
    KIP714_CONFIG,
    RECEIVER_REPORTER,
    assert_forwarded_pushes_landed_once,
    plugin_properties,
    subscribe,
)
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path

#: Each tested Kafka version, and the plugin class its broker loads.
VERSIONS = {
    "3.7.2": RECEIVER_REPORTER,
    "3.8.1": RECEIVER_REPORTER,
    "3.9.1": RECEIVER_REPORTER,
    "4.1.1": RECEIVER_REPORTER,
    "4.4.0": EXPORTER_REPORTER,
}
#: Only 3.7 forwards payloads as the client compressed them.
COMPRESSED_PAYLOADS = {"3.7.2"}
RUN_S = 5.0
INTERVAL_MS = 500
TOPIC = "orders"
PRODUCER_SOURCE = __file__.rsplit("/", 1)[0] + "/TelemetryProducer.java"
JAVA_TIMEOUT_S = 90
DECOMPRESSED = re.compile(r'^kip714_forward_decompressed_total\{codec="(\w+)"\} (\S+)$', re.M)


def compile_producer(jars: Path, version: str, classes: Path) -> list[Path]:
    """``TelemetryProducer.java`` compiled against this version's kafka-clients jar."""
    [client_jar] = jars.glob(f"kafka-clients-{version}.jar")
    classes.mkdir(parents=True)
    result = subprocess.run(
        ["javac", "-Xlint:all", "-Werror", "-d", str(classes), "-cp", str(client_jar),
         PRODUCER_SOURCE],
        check=False, timeout=JAVA_TIMEOUT_S, stdin=subprocess.DEVNULL, capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, f"javac failed:\n{result.stdout}{result.stderr}"
    return [classes, jars / "*"]


def run_librdkafka_producer(bootstrap: str, seconds: float) -> int:
    """A confluent-kafka producer sending records for ``seconds``, then closed (its last push)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "rdkafka-producer",
            "linger.ms": 5,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
        }
    )
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.produce(TOPIC, value=b"rdkafka-%d" % sent)
        sent += 1
        producer.poll(0.02)
    assert producer.flush(20) == 0
    producer.close()
    return sent


def decompressed_by_codec(kip714: ServeProcess) -> dict[str, float]:
    host, port = kip714.http
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {codec: float(count) for codec, count in DECOMPRESSED.findall(text)}


@pytest.mark.parametrize("version", list(VERSIONS))
def test_every_acknowledged_push_lands_once_with_the_brokers_id(
    version: str, tmp_path: Path, broker_plugin_jar: Path
) -> None:
    jars = kafka_dist.kafka_jars(version)
    probe = compile_producer(jars, version, tmp_path / "classes")
    kip714 = ServeProcess(tmp_path / "kip714", KIP714_CONFIG).start()
    broker = KafkaBroker(
        tmp_path / "broker", jars, broker_plugin_jar, plugin_properties(kip714, VERSIONS[version])
    )
    try:
        broker.start()
        subscribe(broker, "org.apache.kafka.producer.", INTERVAL_MS)
        java = subprocess.Popen(
            java_command(probe, "TelemetryProducer", broker.bootstrap, str(RUN_S),
                         "java-producer", TOPIC),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        try:
            run_librdkafka_producer(broker.bootstrap, RUN_S)
            java_output, _ = java.communicate(timeout=JAVA_TIMEOUT_S)
        finally:
            if java.poll() is None:
                java.kill()
                java.wait(10)
        assert java.returncode == 0, java_output
        assert broker.stop()
        counters = broker.forwarder_counters()
        decompressed = decompressed_by_codec(kip714)
    finally:
        broker.kill()
        assert kip714.stop() == 0

    rows = assert_forwarded_pushes_landed_once(counters, tmp_path / "kip714")
    for row in rows:
        assert row["metric_name"].startswith("org.apache.kafka.producer.")
    software = {
        (r["client_id"], r["client_software_name"], r["client_software_version"]) for r in rows
    }
    assert ("java-producer", "apache-kafka-java", version) in software
    assert any(name == "rdkafka-producer" for name, _, _ in software)
    [java_instance] = re.findall(r"^instance (\S+)$", java_output, re.M)
    assert {r["client_instance_id"] for r in rows if r["client_id"] == "java-producer"} == {
        java_instance
    }
    if version in COMPRESSED_PAYLOADS:
        assert sum(decompressed.values()) > 0, "a 3.7 broker forwards payloads compressed"
    else:
        assert decompressed == {}, "this version forwards payloads decompressed"
    if version == NEWEST:
        assert_advise_reads_the_producers_rate(tmp_path / "kip714", java_output)


NEWEST = max(VERSIONS, key=lambda v: tuple(int(p) for p in v.split(".")))


def assert_advise_reads_the_producers_rate(data_dir: Path, java_output: str) -> None:
    """Issue 42: ``quotas advise`` reads the producer's own byte rate back, within 10 %.

    The producer printed its ``outgoing-byte-rate`` just before closing (its
    rates over 1 s samples, so steady by then); its last pushes carry the
    values of that moment. The advice over the seconds around it (one-second
    windows, so its peak is one of those pushes) is that rate as the lake
    holds it: the terminating push's, or under load the last periodic one's.
    """
    [(rate, at_ms)] = re.findall(r"^outgoing-byte-rate (\S+) at (\d+)$", java_output, re.M)
    own = float(rate)
    assert own > 0, java_output

    def iso(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()

    moment = int(at_ms)
    result = subprocess.run(
        [sys.executable, "-m", "telemetry", "quotas", "advise", "--data-dir", str(data_dir),
         "--from", iso(moment - 1500), "--to", iso(moment + 2000), "--window-s", "1"],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [line] = [
        line for line in result.stdout.splitlines()
        if line.startswith("producer_byte_rate") and " java-producer " in line
    ]  # fmt: skip
    peak = float(line.split()[3].replace(",", ""))
    assert abs(peak - own) <= 0.10 * own, (peak, own, result.stdout)
