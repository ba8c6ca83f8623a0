"""``kip714 demo`` end to end: server, real clients, the lake, rollups, health view, report.

The report is opened as a new operator would, in headless Chromium at 1,280 x 2,000
(driven through DevTools, tests/report/devtools.py): it must fit the width, open on the
fleet, and every chart must draw at least 10 points (the demo rolls up a 2 s window).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from typing import TYPE_CHECKING

from pyiceberg.catalog.sql import SqlCatalog

from tests.report.devtools import MEASURE_REPORT, evaluate_in_page

if TYPE_CHECKING:
    from pathlib import Path


def test_demo_runs_the_whole_product(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "telemetry", "demo",  # its default run: charts need 10 points
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
    lake = data / "lake"
    catalog = SqlCatalog(
        "kip714", uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=f"file://{lake / 'warehouse'}"
    )
    assert catalog.load_table("kip714.metrics").scan().to_arrow().num_rows > 0
    health = catalog.load_table("kip714.client_health_1h").scan().to_arrow()
    assert sorted(health.column("client_id").to_pylist()) == ["demo-consumer-0", "demo-producer-0"]
    inventory = catalog.load_table("kip714.client_inventory_1h").scan().to_arrow()
    assert sorted(inventory.column("client_type").to_pylist()) == ["consumer", "producer"]

    # Issue 42: librdkafka pushes no byte rate, so the Kafka quotas get "no observed rate";
    # kip714's own push quotas are advised for each client from the pushes' sizes.
    advise = subprocess.run(
        [sys.executable, "-m", "telemetry", "quotas", "advise", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert advise.returncode == 0, advise.stdout + advise.stderr
    lines = advise.stdout.splitlines()
    for client in ("demo-producer-0", "demo-consumer-0"):
        for quota in ("push_byte_rate", "push_decoded_byte_rate"):
            assert any(line.split()[:1] == [quota] and f" {client} " in line for line in lines)
        assert any(client in line and "no observed rate" in line for line in lines)

    page_view = asyncio.run(evaluate_in_page(page.as_uri(), MEASURE_REPORT, tmp_path / "chrome"))
    assert page_view["scrollWidth"] <= 1280, page_view["scrollWidth"]
    assert page_view["sections"][:2] == ["fleet", "alerts"], page_view["sections"]
    assert page_view["inventory"] >= 4  # two tables, each a head and a row at least
    assert sum(page_view["states"].values()) == 2
    assert page_view["clients"] == 2
    charts = page_view["charts"]
    assert len(charts) == 4 + 5  # a producer's four charts and a consumer's five
    assert all(chart["points"] >= 10 for chart in charts), charts
