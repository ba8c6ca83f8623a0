"""The generated alert rules in a real Prometheus scraping `kip714 serve`, fed by real clients.

Two librdkafka producers in processes of their own push through the Kafka
door; Prometheus (Debian's) scrapes the ``prometheus`` exporter every
second and evaluates the rules ``kip714 alerts prometheus --config`` wrote
for the server's own ``[alerts] rules``. Both clients run a librdkafka the
rules file lists as known-bad, so that rule fires for both; one producer is
then killed with SIGKILL (no terminating push): "stopped pushing" fires for
it and not for the one that keeps pushing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

from confluent_kafka import libversion

from tests.exporters.prometheus_server import PrometheusServer, get_text, wait_for
from tests.exporters.support import PRODUCERS_INTERVAL_MS, PRODUCERS_INTO_JSONL
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path

EXPORTER = """[exporters.scrape]
type = "prometheus"
[exporters.scrape.options]
listen = "127.0.0.1:0"
[alerts]
rules = "rules.toml"
"""
RULES = """
[[rule]]
name = "software_known_bad"
metric = "kip714.client.software_known_bad"
aggregation = "last"
op = "=="
threshold = 1
for_s = 0
severity = "critical"
meaning = "known-bad software"

[[rule]]
name = "client_stopped_pushing"
metric = "kip714.client.push_age_intervals"
aggregation = "last"
op = ">"
threshold = 10  # 3 s: the shipped 3 intervals are 0.9 s here, closer than a busy CI allows
for_s = 0
severity = "warning"
meaning = "stopped pushing"

[[known_bad]]
library = "librdkafka"
first = "{version}"
last = "{version}"
reason = "the version these tests run"
"""
PROMETHEUS = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: ["{rules}"]
scrape_configs:
  - job_name: kip714
    static_configs:
      - targets: ["{target}"]
"""
PRODUCER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": sys.argv[1], "client.id": sys.argv[2]})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        producer.poll(0.1)
    producer.close()
    """
)


def _firing(api: str) -> dict[tuple[str, str], dict[str, Any]]:
    answer = json.loads(get_text(f"http://{api}/api/v1/alerts"))
    return {
        (alert["labels"]["alertname"], alert["labels"].get("client_id", "")): alert
        for alert in answer["data"]["alerts"]
        if alert["state"] == "firing"
    }


def test_prometheus_fires_the_generated_rules_for_the_clients_that_break_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "rules.toml").write_text(RULES.format(version=libversion()[0]))
    out = tmp_path / "out"
    server = ServeProcess(tmp_path / "data", (PRODUCERS_INTO_JSONL + EXPORTER).format(out=out))
    assert server.config_path is not None and server.config_path.parent == tmp_path
    server.start()
    prometheus: PrometheusServer | None = None
    producers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        exporter = wait_for(
            lambda: next(
                (line.split("serving http://")[1].split("/")[0] for line in server.lines
                 if "prometheus exporter serving http://" in line),
                None,
            )
        )  # fmt: skip
        assert exporter, server.lines
        rules_yml = tmp_path / "kip714-rules.yml"
        made = subprocess.run(
            [sys.executable, "-m", "telemetry", "alerts", "prometheus",
             "--config", str(server.config_path), "--out", str(rules_yml)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        prometheus = PrometheusServer(tmp_path, PROMETHEUS.format(rules=rules_yml, target=exporter))
        api = prometheus.address()
        for client_id in ("kept", "killed"):
            producers[client_id] = subprocess.Popen(
                [sys.executable, "-c", PRODUCER, server.bootstrap, client_id]
            )
        both_bad = {("software_known_bad", "kept"), ("software_known_bad", "killed")}
        assert wait_for(lambda: both_bad <= set(_firing(api)), 60), _firing(api)
        firing = _firing(api)
        assert firing[("software_known_bad", "kept")]["labels"]["severity"] == "critical"
        assert not any(name == "client_stopped_pushing" for name, _ in firing)

        producers["killed"].send_signal(signal.SIGKILL)
        producers["killed"].wait(10)
        # 10 intervals of 300 ms, then a scrape and an evaluation: seconds, not minutes.
        stopped = ("client_stopped_pushing", "killed")
        assert wait_for(lambda: stopped in _firing(api), 30), _firing(api)
        firing = _firing(api)
        assert ("client_stopped_pushing", "kept") not in firing
        assert float(firing[stopped]["value"]) > 10
        assert producers["kept"].poll() is None  # still pushing, every PRODUCERS_INTERVAL_MS
        assert PRODUCERS_INTERVAL_MS == 300
    finally:
        for process in producers.values():
            process.kill()
            process.wait(10)
        server.kill()
        if prometheus is not None:
            prometheus.stop()
