"""``kip714 report`` over Iceberg rollup tables, opened in headless Chromium.

The tables are written with pyiceberg as the rollups write them. The report
must name no URL and load nothing (its Content-Security-Policy forbids it),
list clients worst p99 first, and draw every chart: each chart's box in a
Chromium screenshot holds pixels of its series' colours. The boxes are
measured by a copy of the page with a script added that writes them into the
DOM, which ``--dump-dom`` prints.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

from PIL import Image

from report.svg import PALETTE
from tests.report.lake_tables import T0, write_tables

if TYPE_CHECKING:
    from pathlib import Path

WINDOW = (1100, 2600)
CLIENTS = [  # client id, instance id, type, p99 scale
    ("fast-producer", "AAAAAAAAAAAAAAAAAAAAAQ", "producer", 1.0),
    ("slow-producer", "AAAAAAAAAAAAAAAAAAAAAg", "producer", 9.0),
    ("some-consumer", "AAAAAAAAAAAAAAAAAAAAAw", "consumer", 3.0),
]
_MEASURE = """<script>
document.body.dataset.boxes = JSON.stringify([...document.querySelectorAll("svg.chart")].map(
  (svg) => { const r = svg.getBoundingClientRect();
             return [svg.id, r.left, r.top, r.width, r.height]; }));
</script>"""


def _rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    health, gauges = [], []
    for client_id, instance, kind, scale in CLIENTS:
        ident = {
            "client_id": client_id,
            "client_instance_id": instance,
            "client_software_name": "confluent-kafka-python",
            "client_software_version": "2.16.1-rdkafka-2.16.0",
        }
        health.append(
            {
                "window_start": T0,
                "window_end": T0 + dt.timedelta(hours=1),
                **ident,
                "client_type": kind,
                "request_latency_avg_ms": 2.0 * scale,
                "request_latency_p99_ms": 10.0 * scale,
                "request_latency_max_ms": 12.0 * scale,
                "queue_time_avg_ms": 1.0 if kind == "producer" else None,
                "throttle_time_max_ms": 0.5 if kind == "producer" else None,
                "connection_creation_rate": 0.02,
                "connections_created": 2.0,
            }
        )
        metrics = ["node.request.latency.avg", "connection.creation.rate"]
        if kind == "producer":
            metrics += ["record.queue.time.avg", "produce.throttle.time.avg"]
        for minute in range(30):
            start = T0 + dt.timedelta(minutes=minute)
            for metric in metrics:
                value = scale * (1.0 + (minute % 7) / 3)
                gauges.append(
                    {
                        "window_start": start,
                        "window_end": start + dt.timedelta(minutes=1),
                        "metric_name": f"org.apache.kafka.{kind}.{metric}",
                        **ident,
                        "node_id": "1" if metric.startswith("node.") else None,
                        "count": 6,
                        "min": value / 2,
                        "max": value * 2,
                        "avg": value,
                        "last": value,
                        "p50": value,
                        "p95": value * 1.5,
                        "p99": value * 1.8,
                    }
                )
    # Outside --from/--to: must not show.
    gauges.append({**gauges[0], "window_start": T0 - dt.timedelta(days=1), "p99": 1e6})
    return health, gauges


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium")
    assert binary, "Debian's chromium package is needed (.ci/run installs it)"
    return subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def test_the_report_is_self_contained_ordered_and_draws_every_chart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_tables(data, *_rows())
    out = tmp_path / "report.html"
    result = subprocess.run(
        [
            sys.executable, "-m", "telemetry", "report", "--data-dir", str(data),
            "--from", "2026-11-25T10:00", "--to", "2026-11-25T11:00", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"3 client instance(s) -> {out}" in result.stdout
    html = out.read_text()

    assert not re.search(r"https?:|//[a-z]|src=|href=|url\(|@import|<script|<link", html)
    assert "default-src 'none'" in html
    table = html[html.index('<table id="health">') : html.index("</table>")]
    order = [table.index(client) for client in ("slow-producer", "some-consumer", "fast-producer")]
    assert order == sorted(order)
    assert "1000000" not in html  # the row outside the range is not charted

    measured = tmp_path / "measured.html"
    measured.write_text(html.replace("</body>", _MEASURE + "</body>").replace("default-src", "x"))
    dom = _chromium("--dump-dom", measured.as_uri(), profile=tmp_path / "profile-dom")
    boxes = json.loads(
        re.search(r'data-boxes="([^"]*)"', dom.stdout)[1].replace("&quot;", '"')  # type: ignore[index]
    )
    assert len(boxes) == 4 * len(CLIENTS)

    shot = tmp_path / "report.png"
    taken = _chromium(f"--screenshot={shot}", out.as_uri(), profile=tmp_path / "profile-shot")
    assert shot.exists(), taken.stderr
    image = Image.open(shot).convert("RGB")
    assert image.size == WINDOW
    pixels = image.load()
    assert pixels is not None
    first, second = _rgb(PALETTE[0]), _rgb(PALETTE[1])
    for chart_id, left, top, width, height in boxes:
        drawn = Counter(
            pixels[x, y]
            for x in range(int(left), int(left + width))
            for y in range(int(top), int(top + height))
        )
        # Consumers have no queue or throttle time: those two charts say "no data".
        if chart_id.startswith("chart-1-") and chart_id[-1] in "12":
            assert drawn[first] == 0, chart_id
            assert len(drawn) > 1, chart_id  # the frame and its text are drawn
            continue
        # A legend square is 100 pixels; a line across the chart is many more.
        assert drawn[first] > 300, (chart_id, drawn[first])
        if chart_id.endswith("-0"):
            assert drawn[second] > 300, (chart_id, drawn[second])  # p99 beside p50
