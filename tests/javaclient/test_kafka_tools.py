"""Apache Kafka's own admin tools (kafka-tools 4.4) managing a running ``kip714 serve``.

``kafka-client-metrics.sh`` runs ``org.apache.kafka.tools.ClientMetricsCommand``
and ``kafka-configs.sh`` runs ``org.apache.kafka.tools.ConfigCommand`` (Kafka 4
moved it out of the core jar); both are started here from the cached jars with
``--bootstrap-server`` pointing at kip714. Each test checks the tool's own
output and exit status, and what kip714 then holds, read back over its HTTP
admin API (the static file layer, the dynamic layer and the values in force).
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest

from tests.kafka import kafka_dist
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CONFIG = """
[subscriptions.fromfile]
metrics = ["org.apache.kafka.consumer."]
"interval.ms" = 30000
[[quotas.clients]]
client_id = "filed"
push_byte_rate = 500
"""
LOG4J2 = """
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %p %c{1} %m%n
"""
TOOL_TIMEOUT_S = 120
GENERATED = re.compile(r"^Altered client metrics config for (\S+)\.$", re.MULTILINE)


class Tools:
    """Kafka's tool main classes, each run in its own short-lived JVM against one server."""

    def __init__(self, server: ServeProcess, jars: Path, workdir: Path) -> None:
        self.server = server
        self.jars = jars
        self.log_config = workdir / "tools-log4j2.properties"
        self.log_config.write_text(LOG4J2)

    def run(self, tool: str, *args: str, status: int = 0) -> str:
        """The tool's stdout and stderr together, after checking its exit status."""
        command = kafka_dist.java_command(
            [self.jars / "*"],
            f"org.apache.kafka.tools.{tool}",
            "--bootstrap-server", self.server.bootstrap, *args,
        )  # fmt: skip
        command.insert(1, f"-Dlog4j2.configurationFile={self.log_config}")
        result = subprocess.run(
            command,
            check=False,
            timeout=TOOL_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        output = result.stdout + result.stderr
        assert result.returncode == status, f"{tool} {' '.join(args)}:\n{output}"
        return output

    def client_metrics(self, *args: str, status: int = 0) -> str:
        return self.run("ClientMetricsCommand", *args, status=status)

    def configs(self, *args: str, status: int = 0) -> str:
        return self.run("ConfigCommand", *args, status=status)

    def admin(self, path: str) -> Any:
        """kip714's own view, from its HTTP admin API (open on loopback without a token)."""
        host, port = self.server.http
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/admin/{path}") as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            return {"status": error.code}

    def subscription(self, name: str) -> dict[str, tuple[str, str]]:
        """Each key of a subscription as (value in force, its source); {} when unknown."""
        described = self.admin(f"subscriptions/{name}")
        if described.get("status") == 404:
            return {}
        return {key: (c["value"], c["source"]) for key, c in described["configs"].items()}

    def quotas(self) -> dict[tuple[tuple[str, str], ...], dict[str, Any]]:
        """Every quota entity kip714 knows: its sorted (type, name) pairs to its layers."""
        return {
            tuple(sorted(entry["entity"].items())): entry
            for entry in self.admin("quotas")["quotas"]
        }


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tools]:
    workdir = tmp_path_factory.mktemp("kafka-tools")
    jars = kafka_dist.kafka_jars()
    server = ServeProcess(workdir / "data", CONFIG).start()
    try:
        yield Tools(server, jars, workdir)
        assert server.stop() == 0
    finally:
        server.kill()
    # The file subscribes consumers only, and the server says so once at start (expected).
    unexpected = [
        e
        for e in server.events()
        if e.get("level") in {"warning", "error"}
        and "matches the producer metrics" not in str(e.get("event"))
    ]
    assert not unexpected


def test_kafka_client_metrics_alters_lists_describes_and_deletes(tools: Tools) -> None:
    altered = tools.client_metrics(
        "--alter", "--name", "producers", "--metrics", "org.apache.kafka.producer.",
        "--interval", "1000",
    )  # fmt: skip
    assert altered == "Altered client metrics config for producers.\n"
    assert tools.subscription("producers") == {
        "metrics": ("org.apache.kafka.producer.", "CLIENT_METRICS_CONFIG"),
        "interval.ms": ("1000", "CLIENT_METRICS_CONFIG"),
        "match": ("", "DEFAULT_CONFIG"),
    }

    generated = tools.client_metrics(
        "--alter", "--generate-name", "--metrics", "org.apache.kafka.consumer.",
        "--interval", "2000", "--match", "client_id=kt-.*",
        "--match", "client_software_name=apache-kafka-java",
    )  # fmt: skip
    [name] = GENERATED.findall(generated)
    assert tools.subscription(name) == {
        "metrics": ("org.apache.kafka.consumer.", "CLIENT_METRICS_CONFIG"),
        "interval.ms": ("2000", "CLIENT_METRICS_CONFIG"),
        "match": (
            "client_id=kt-.*,client_software_name=apache-kafka-java",
            "CLIENT_METRICS_CONFIG",
        ),
    }

    listed = tools.client_metrics("--list").splitlines()
    assert {"producers", name, "fromfile"} <= set(listed)
    assert tools.client_metrics("--describe", "--name", "producers") == (
        "Client metrics configs for producers are:\n"
        "  interval.ms=1000\n"
        "  match=\n"
        "  metrics=org.apache.kafka.producer.\n"
    )
    unknown = tools.client_metrics("--describe", "--name", "nobody")
    assert unknown == (
        "The client metric resource nobody doesn't exist and doesn't have dynamic config.\n"
    )

    deleted = tools.client_metrics("--delete", "--name", "producers")
    assert deleted == "Deleted client metrics config for producers.\n"
    assert tools.subscription("producers") == {}
    assert "producers" not in tools.client_metrics("--list").splitlines()
    # A subscription from the file survives a delete: only its dynamic keys can go.
    tools.client_metrics("--delete", "--name", "fromfile")
    assert tools.subscription("fromfile")["interval.ms"] == ("30000", "STATIC_BROKER_CONFIG")

    refused = tools.client_metrics(
        "--alter", "--name", "fast", "--metrics", "*", "--interval", "5", status=1
    )
    assert "InvalidRequestException: Invalid value 5 for interval.ms" in refused
    assert tools.subscription("fast") == {}


def test_kafka_configs_alters_and_describes_client_metrics(tools: Tools) -> None:
    altered = tools.configs(
        "--alter", "--entity-type", "client-metrics", "--entity-name", "lists",
        "--add-config", "interval.ms=2000,metrics=[a.,b.]",
    )  # fmt: skip
    assert altered == "Completed updating config for client-metric lists.\n"
    assert tools.subscription("lists") == {
        "metrics": ("a.,b.", "CLIENT_METRICS_CONFIG"),
        "interval.ms": ("2000", "CLIENT_METRICS_CONFIG"),
        "match": ("", "DEFAULT_CONFIG"),
    }
    described = tools.configs(
        "--describe", "--entity-type", "client-metrics", "--entity-name", "lists"
    )
    assert described == (
        "Dynamic configs for client-metric lists are:\n"
        "  interval.ms=2000 sensitive=false synonyms="
        "{DYNAMIC_CLIENT_METRICS_CONFIG:interval.ms=2000}\n"
        "  metrics=a.,b. sensitive=false synonyms={DYNAMIC_CLIENT_METRICS_CONFIG:metrics=a.,b.}\n"
    )

    every = tools.configs("--describe", "--entity-type", "client-metrics", "--all")
    assert (
        "All configs for client-metric fromfile are:\n"
        "  interval.ms=30000 sensitive=false synonyms={STATIC_BROKER_CONFIG:interval.ms=30000}\n"
    ) in every
    assert "  match= sensitive=false synonyms={}\n" in every  # the default of "lists"

    tools.configs(
        "--alter", "--entity-type", "client-metrics", "--entity-name", "lists",
        "--delete-config", "metrics", "--add-config", "match=[client_id=a.*]",
    )  # fmt: skip
    assert tools.subscription("lists") == {
        "metrics": ("", "DEFAULT_CONFIG"),
        "interval.ms": ("2000", "CLIENT_METRICS_CONFIG"),
        "match": ("client_id=a.*", "CLIENT_METRICS_CONFIG"),
    }


def test_kafka_configs_alters_describes_and_deletes_quotas(tools: Tools) -> None:
    alter = ("--alter", "--add-config")
    assert tools.configs(
        *alter, "producer_byte_rate=1024,request_percentage=20",
        "--entity-type", "users", "--entity-name", "alice",
    ) == "Completed updating config for user alice.\n"  # fmt: skip
    tools.configs(
        *alter, "producer_byte_rate=2048", "--entity-type", "clients", "--entity-name", "c1"
    )
    assert (
        tools.configs(
            *alter, "producer_byte_rate=4096", "--entity-type", "users", "--entity-default"
        )
        == "Completed updating default config for users in the cluster.\n"
    )
    tools.configs(
        *alter, "controller_mutation_rate=2.5", "--entity-type", "users", "--entity-name", "alice",
        "--entity-type", "clients", "--entity-name", "c1",
    )  # fmt: skip
    tools.configs(
        *alter, "connection_creation_rate=10", "--entity-type", "ips", "--entity-name", "127.0.0.2"
    )
    tools.configs(
        *alter, "connection_creation_rate=100", "--entity-type", "ips", "--entity-default"
    )

    assert tools.configs("--describe", "--entity-type", "users") == (
        "Quota configs for the default user-principal are producer_byte_rate=4096.0\n"
        "Quota configs for user-principal 'alice' are "
        "producer_byte_rate=1024.0, request_percentage=20.0\n"
    )
    assert tools.configs("--describe", "--entity-type", "clients", "--entity-name", "c1") == (
        "Quota configs for client-id 'c1' are producer_byte_rate=2048.0\n"
    )
    both = tools.configs("--describe", "--entity-type", "users", "--entity-type", "clients")
    assert both == (
        "Quota configs for user-principal 'alice', client-id 'c1' are "
        "controller_mutation_rate=2.5\n"
    )
    assert tools.configs("--describe", "--entity-type", "ips") == (
        "Quota configs for the default ip are connection_creation_rate=100.0\n"
        "Quota configs for ip '127.0.0.2' are connection_creation_rate=10.0\n"
    )
    quotas = tools.quotas()
    assert quotas[(("user", "alice"),)]["in_force"] == {
        "push_byte_rate": 1024.0,
        "request_percentage": 20.0,
    }
    assert quotas[(("user", "<default>"),)]["in_force"] == {"push_byte_rate": 4096.0}
    assert quotas[(("client-id", "c1"), ("user", "alice"))]["dynamic"] == {
        "controller_mutation_rate": 2.5
    }
    assert quotas[(("ip", "<default>"),)]["in_force"] == {"connection_creation_rate": 100.0}

    # ConfigCommand only deletes a key it found described under Kafka's name.
    deleted = tools.configs(
        "--alter", "--entity-type", "users", "--entity-name", "alice",
        "--delete-config", "producer_byte_rate",
    )  # fmt: skip
    assert deleted == "Completed updating config for user alice.\n"
    assert tools.quotas()[(("user", "alice"),)]["dynamic"] == {"request_percentage": 20.0}
    tools.configs(
        "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.2",
        "--delete-config", "connection_creation_rate",
    )  # fmt: skip
    assert (("ip", "127.0.0.2"),) not in tools.quotas()

    refused = tools.configs(
        *alter, "consumer_byte_rate=5", "--entity-type", "users", "--entity-name", "bob", status=1
    )
    assert "InvalidRequestException: Invalid configuration key consumer_byte_rate" in refused
    assert (("user", "bob"),) not in tools.quotas()


def test_kafka_configs_manages_scram_credentials(tools: Tools) -> None:
    user = ("--entity-type", "users", "--entity-name", "carol")
    added = tools.configs(
        "--alter", *user, "--add-config", "SCRAM-SHA-256=[iterations=8192,password=pw]"
    )
    assert added == "Completed updating config for user carol.\n"
    assert tools.configs("--describe", *user) == (
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=8192\n"
    )
    refused = tools.configs(
        "--alter", *user, "--add-config", "SCRAM-SHA-512=[iterations=20000,password=pw]", status=1
    )
    assert "UnacceptableCredentialException: Too many iterations" in refused
    tools.configs("--alter", *user, "--delete-config", "SCRAM-SHA-256")
    assert tools.configs("--describe", *user) == ""
