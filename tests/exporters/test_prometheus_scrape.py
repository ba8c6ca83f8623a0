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

import re
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import Producer

from tests.exporters.prometheus_server import PrometheusServer, get_text, query, wait_for
from tests.exporters.support import PRODUCERS_INTERVAL_MS, PRODUCERS_INTO_JSONL
from tests.telemetry.serve_process import ServeProcess
from tests.telemetry.server_support import close_between_pushes, exported_rows

if TYPE_CHECKING:
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


def test_prometheus_reads_the_pushed_latency_and_loses_a_terminated_client(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    server = ServeProcess(tmp_path / "data", CONFIG.format(out=out)).start()
    prometheus: PrometheusServer | None = None
    try:
        exporter = wait_for(
            lambda: next((m[1] for line in server.lines if (m := EXPORTER_AT.search(line))), None)
        )
        assert exporter, server.lines
        prometheus = PrometheusServer(tmp_path, PROMETHEUS.format(target=exporter))
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
            series = query(api, promql)
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
        assert wait_for(lambda: 'client_id="scraped"' not in get_text(scrape_url), 20)
        # Prometheus marks the series stale at its next scrape: the query comes back empty.
        assert wait_for(lambda: not query(api, promql), 20)
        assert server.stop() == 0
    finally:
        server.kill()
        if prometheus is not None:
            prometheus.stop()
