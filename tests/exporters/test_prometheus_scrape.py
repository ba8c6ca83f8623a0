"""A real Prometheus scrapes the prometheus exporter of `kip714 serve`, fed by a real client.

Debian's ``prometheus`` (installed by ``.ci/run``) runs on loopback with a
temporary configuration scraping the exporter every second; the client's
request latency is read back through Prometheus' HTTP API and compared with
what the client pushed (the ``jsonl`` landing beside it records that), and
after the client's terminating push its series is gone from the next scrape.

The client is closed between two pushes (``close_between_pushes``), so that
it sends that terminating push.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from confluent_kafka import Producer

from tests.exporters.support import PRODUCERS_INTERVAL_MS, PRODUCERS_INTO_JSONL
from tests.telemetry.serve_process import ServeProcess
from tests.telemetry.server_support import close_between_pushes, exported_rows

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

CONFIG = (
    PRODUCERS_INTO_JSONL
    + """[exporters.scrape]
type = "prometheus"
[exporters.scrape.options]
listen = "127.0.0.1:0"
"""
)
PROMETHEUS = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: kip714
    static_configs:
      - targets: ["{target}"]
"""
METRIC = "org_apache_kafka_producer_request_latency_avg"
EXPORTER_AT = re.compile(r"prometheus exporter serving http://([^/]+)/metrics")
PROMETHEUS_AT = re.compile(r'msg="Listening on" address=(\S+)')


def _wait_for(find: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.2)
    return find()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def _query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    answer = json.loads(
        _get(f"http://{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    )
    assert answer["status"] == "success"
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


class _Prometheus:
    def __init__(self, tmp_path: Path, target: str) -> None:
        binary = shutil.which("prometheus")
        assert binary, "Debian's prometheus package is needed (.ci/run installs it)"
        config = tmp_path / "prometheus.yml"
        config.write_text(PROMETHEUS.format(target=target))
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                "--web.listen-address=127.0.0.1:0",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def address(self) -> str:
        def find() -> str | None:
            for line in list(self.lines):
                match = PROMETHEUS_AT.search(line)
                if match:
                    return match[1]
            return None

        address: str | None = _wait_for(find)
        assert address, "".join(self.lines)
        return address

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._drainer.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()


def test_prometheus_reads_the_pushed_latency_and_loses_a_terminated_client(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    server = ServeProcess(tmp_path / "data", CONFIG.format(out=out)).start()
    prometheus: _Prometheus | None = None
    try:
        exporter = _wait_for(
            lambda: next((m[1] for line in server.lines if (m := EXPORTER_AT.search(line))), None)
        )
        assert exporter, server.lines
        prometheus = _Prometheus(tmp_path, exporter)
        api = prometheus.address()

        producer = Producer(
            {
                "bootstrap.servers": server.bootstrap,
                "client.id": "scraped",
                "enable.sparse.connections": False,
            }
        )
        promql = f'{METRIC}{{client_id="scraped"}}'
        deadline = time.monotonic() + 30
        series: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not series:
            producer.poll(0.2)
            series = _query(api, promql)
        assert series, "Prometheus never saw the client's request latency"
        ((found,),) = [series]
        labels = found["metric"]
        assert labels["job"] == "kip714"
        assert labels["client_software_name"] == "confluent-kafka-python"
        assert len(labels["client_instance_id"]) == 22
        assert labels["principal"] == "User:ANONYMOUS"
        value = float(found["value"][1])
        landed = out / "kip714.jsonl"
        pushed = {
            row["value"]
            for row in exported_rows(landed)
            if row["metric_name"] == "org.apache.kafka.producer.request.latency.avg"
            and row["client_id"] == "scraped"
        }
        assert value in pushed

        close_between_pushes(producer.close, landed, "scraped", PRODUCERS_INTERVAL_MS)
        del producer
        scrape_url = f"http://{exporter}/metrics"
        assert _wait_for(lambda: 'client_id="scraped"' not in _get(scrape_url), 20)
        # Prometheus marks the series stale at its next scrape: the query comes back empty.
        assert _wait_for(lambda: not _query(api, promql), 20)
        assert server.stop() == 0
    finally:
        server.kill()
        if prometheus is not None:
            prometheus.stop()
