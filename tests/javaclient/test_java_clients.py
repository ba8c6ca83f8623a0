"""Apache Kafka's own Java clients (kafka-clients 4.4) pointed straight at ``kip714 serve``.

``TelemetryProbe.java`` runs an idempotent producer (the Java default), a
consumer without group (assigned a partition), two group consumers
(subscribed; the classic group protocol and KIP-848's) and an admin client
(``enable.metrics.push=true``) against kip714 for a few seconds with a 1 s
subscription, then closes them. Their telemetry must land in the table once
per acknowledged push, under the software name the Java client sends in
ApiVersions, and none of them may run into a missing API: the group
consumers' FindCoordinator and the producer's InitProducerId are answered,
so no ``poll`` throws and the producer never turns fatal.

Two more clients pin down what the Java defaults leave out, as the README
says: an admin client as configured by default (``enable.metrics.push`` is
false for it) and a consumer that is never polled never ask for telemetry.
"""

from __future__ import annotations

import collections
import re
import subprocess
import urllib.request
from typing import TYPE_CHECKING, Any

from tests.exporters.lake_support import table_rows
from tests.kafka.kafka_dist import KAFKA_VERSION, java_command
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 1000
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
path = "{landing}"
max_file_age_s = 1
raw = true
"""
# The client's own record of every push it sends, and of a producer turning fatal.
LOG4J2 = """
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %p %c{1} %m%n
logger.telemetry.name = org.apache.kafka.common.telemetry.internals.ClientTelemetryReporter
logger.telemetry.level = DEBUG
logger.transactions.name = org.apache.kafka.clients.producer.internals.TransactionManager
logger.transactions.level = INFO
"""
PREFIX = "jc"
RUN_S = 5.0
DRIVER_TIMEOUT_S = 120
CLIENTS = {
    f"{PREFIX}-producer": "org.apache.kafka.producer.",
    f"{PREFIX}-admin": "org.apache.kafka.admin.client.",
    f"{PREFIX}-assigned": "org.apache.kafka.consumer.",
    f"{PREFIX}-grouped": "org.apache.kafka.consumer.",
    f"{PREFIX}-kip848": "org.apache.kafka.consumer.",
}
SILENT = (f"{PREFIX}-admin-default", f"{PREFIX}-idle")
PUSH_SENT = re.compile(r"Creating telemetry push request with client instance id (\S+)")


def run_driver(class_path: list[Path], bootstrap: str, workdir: Path) -> tuple[str, str]:
    config = workdir / "log4j2.properties"
    config.write_text(LOG4J2)
    command = java_command(class_path, "TelemetryProbe", bootstrap, str(RUN_S), PREFIX)
    command.insert(1, f"-Dlog4j2.configurationFile={config}")
    result = subprocess.run(
        command,
        check=False,
        timeout=DRIVER_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"the Java driver failed:\n{result.stdout}{result.stderr}"
    return result.stdout, result.stderr


def prometheus(server: ServeProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{server.http[0]}:{server.http[1]}/metrics") as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def table(landing: Path, name: str, columns: list[str]) -> list[dict[str, Any]]:
    return table_rows(landing, columns, name)


def test_java_clients_push_telemetry_that_lands_once_per_acknowledged_push(
    tmp_path: Path, probe_class_path: list[Path]
) -> None:
    landing = tmp_path / "landing"
    server = ServeProcess(tmp_path / "data", CONFIG.format(landing=landing)).start()
    try:
        stdout, stderr = run_driver(probe_class_path, server.bootstrap, tmp_path)
        samples = prometheus(server)
        assert server.stop() == 0  # SIGTERM: flush, publish, commit
    finally:
        server.kill()

    # The driver: every client got an instance id, no poll threw, all closed.
    lines = stdout.splitlines()
    assert not [line for line in lines if line.startswith("poll-error")], stdout
    reported = dict(line.split()[1:3] for line in lines if line.startswith("instance "))
    instances = {client: reported.pop(client) for client in CLIENTS}
    assert "null" not in instances.values(), stdout
    assert reported == {f"{PREFIX}-idle": "null"}, stdout
    refused = f"no-instance {PREFIX}-admin-default java.lang.IllegalStateException: Telemetry"
    assert refused in stdout
    closed_in_order = [line.split()[1] for line in lines if line.startswith("closed ")]
    assert closed_in_order == [*CLIENTS, *SILENT]
    # The Java clients themselves: no error, the producer got an id and stayed healthy.
    assert not [line for line in stderr.splitlines() if line.startswith("ERROR")], stderr
    assert "ProducerId set to 0 with epoch 0" in stderr
    assert "fatal error state" not in stderr

    # kip714: what it answered, and no connection closed but by the clients.
    requests = 'kip714_kafka_requests_total{api="%s"}'
    assert samples[requests % "InitProducerId"] == 1
    assert samples[requests % "FindCoordinator"] >= 1
    # One subscription per pushing client: the two silent ones never asked.
    assert samples['kip714_get_subscriptions_requests_total{error_code="NONE"}'] == len(CLIENTS)
    accepted = samples['kip714_push_requests_total{error_code="NONE",outcome="accepted"}']
    assert samples[requests % "PushTelemetry"] == accepted
    closed = {k for k in samples if k.startswith("kip714_kafka_connections_closed_total")}
    assert closed <= {'kip714_kafka_connections_closed_total{reason="eof"}'}
    assert not [e for e in server.events() if e.get("level") in {"warning", "error"}]

    # Landed: one raw row per acknowledged push, the flattened rows of exactly those pushes.
    pushes = table(
        landing,
        "pushes",
        ["push_offset", "client_instance_id", "client_id", "client_software_name",
         "client_software_version", "push_interval_ms"],
    )  # fmt: skip
    offsets = [push["push_offset"] for push in pushes]
    assert len(offsets) == len(set(offsets)) == accepted
    metrics = table(landing, "metrics", ["push_offset", "client_instance_id", "metric_name"])
    assert {row["push_offset"] for row in metrics} == set(offsets)
    assert {(p["client_id"], p["client_instance_id"]) for p in pushes} == set(instances.items())
    assert {p["client_software_name"] for p in pushes} == {"apache-kafka-java"}
    assert {p["client_software_version"] for p in pushes} == {KAFKA_VERSION}
    assert {p["push_interval_ms"] for p in pushes} == {1000}

    landed = collections.Counter(push["client_instance_id"] for push in pushes)
    sent = collections.Counter(PUSH_SENT.findall(stderr))
    names: dict[str, set[str]] = collections.defaultdict(set)
    for row in metrics:
        names[row["client_instance_id"]].add(row["metric_name"])
    for client_id, prefix in CLIENTS.items():
        instance = instances[client_id]
        assert landed[instance] >= 2, (client_id, landed)
        # Every push the client sent landed, but one still in flight when it closed.
        assert sent[instance] - 1 <= landed[instance] <= sent[instance], (client_id, sent, landed)
        assert all(name.startswith("org.apache.kafka.") for name in names[instance])
        assert f"{prefix}connection.creation.total" in names[instance], (client_id, names)
