"""``kip714 demo`` end to end: server, real clients, landing, rollups, health view."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import TYPE_CHECKING

import pyarrow.dataset as ds

if TYPE_CHECKING:
    from pathlib import Path


def test_demo_runs_the_whole_product(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "telemetry", "demo", "--seconds", "4",
         "--producers", "1", "--consumers", "1", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "landed" in out
    assert "Per-client health" in out
    health_rows = [line for line in out.splitlines() if "demo-producer-0" in line]
    assert any("producer" in line for line in health_rows)
    assert any("demo-consumer-0" in line for line in out.splitlines())
    assert "conn tries/s" in out
    accepted = re.search(r"kip714 accepted (\d+) Kafka connections in total", out)
    assert accepted and int(accepted[1]) >= 2, out
    page = data / "report.html"
    assert f"HTML report (open it in a browser): {page}" in out
    assert "demo-producer-0" in page.read_text()
    landed = ds.dataset(data / "metrics", format="parquet", partitioning="hive").count_rows()
    assert landed > 0
    health = ds.dataset(data / "rollups" / "client_health_1h", partitioning="hive").to_table()
    assert sorted(health.column("client_id").to_pylist()) == ["demo-consumer-0", "demo-producer-0"]
