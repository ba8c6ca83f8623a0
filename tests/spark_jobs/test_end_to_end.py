"""A real librdkafka producer pushes to `kip714 serve`; the rollup counts what it pushed.

The server lands in the lake's Iceberg table; the job runs on the lake as a
subprocess, like a user would, and its rollup tables are read with pyiceberg.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from spark_jobs.lake import Lake
from tests.spark_jobs.lake_writer import catalog
from tests.telemetry.serve_process import ServeProcess
from tests.telemetry.server_support import exported_rows

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 300
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
path = "{data}"
max_file_age_s = 0.5
[exporters.lines]
type = "jsonl"
[exporters.lines.options]
path = "{out}/kip714.jsonl"
"""
CLIENT = "e2e-producer"


def pushed(out: Path) -> list[dict[str, object]]:
    return [row for row in exported_rows(out / "kip714.jsonl") if row["client_id"] == CLIENT]


def test_rollup_counts_match_what_a_real_client_pushed(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    server = ServeProcess(data, CONFIG.format(data=data, out=out)).start()
    try:
        producer = Producer(
            {
                "bootstrap.servers": server.bootstrap,
                "client.id": CLIENT,
                "enable.sparse.connections": False,
                "reconnect.backoff.ms": 100,
            }
        )
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            producer.poll(0.05)
        producer.flush(2)
        producer.close()
        deadline = time.monotonic() + 20
        while not any(r["terminating"] for r in pushed(out)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.stop() == 0  # SIGTERM: the landing flushes and publishes
    finally:
        server.kill()
    rows = pushed(out)
    assert len({r["push_offset"] for r in rows}) >= 3
    expected = collections.Counter(
        (str(r["metric_name"]), str(r["metric_type"]))
        for r in rows
        if r["metric_type"] in ("gauge", "sum") and r["value"] is not None
    )

    lake = Lake.under(data)
    result = subprocess.run(
        [sys.executable, "-m", "spark_jobs.job", "--data-dir", str(data), "--windows", "1h"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # Spark stays quiet
    assert f"{sum(1 for _ in rows):,} data points read" in result.stdout

    rolled: collections.Counter[tuple[str, str]] = collections.Counter()
    for name, kind, column in (("gauges_1h", "gauge", "count"), ("sums_1h", "sum", "points")):
        table = catalog(lake).load_table(f"{lake.namespace}.{name}").scan().to_arrow()
        for metric, client, n in zip(
            table.column("metric_name").to_pylist(),
            table.column("client_id").to_pylist(),
            table.column(column).to_pylist(),
            strict=True,
        ):
            if client == CLIENT:
                rolled[(metric, kind)] += n
    assert rolled == expected
