"""``kip714 report`` over Iceberg rollup tables, opened in headless Chromium.

The tables are written with pyiceberg as the rollups write them. The report
must name no URL and load nothing (its Content-Security-Policy forbids it),
open on the fleet (inventory, health states, the period's alerts worst
first), list clients worst state first, print counts as integers and ids in
both forms, fit 1,280 px, and draw every chart: each chart's box (measured
through DevTools) in a Chromium screenshot holds pixels of its series' colours.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import re
import shutil
import subprocess
import sys
from collections import Counter
from html import escape
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from health_rules import load_rules
from report import main as report_main
from report.svg import PALETTE
from telemetry.cli.main import main as kip714_main
from tests.report.devtools import MEASURE_REPORT, evaluate_in_page
from tests.report.lake_tables import T0, write_tables

WINDOW = (1280, 2600)
CLIENTS = [  # client id, instance id, type, p99 scale
    ("fast-producer", "AAAAAAAAAAAAAAAAAAAAAQ", "producer", 1.0),
    ("slow-producer", "_-8AAAAAAAAAAAAAAAAAAg", "producer", 9.0),
    ("some-consumer", "AAAAAAAAAAAAAAAAAAAAAw", "consumer", 3.0),
]


def _alert(client: int, rule: str, severity: str, minute: int) -> dict[str, Any]:
    client_id, instance, _, _ = CLIENTS[client]
    fired = T0 + dt.timedelta(minutes=minute)
    return {
        "window_start": T0,
        "window_end": T0 + dt.timedelta(hours=1),
        "client_id": client_id,
        "client_instance_id": instance,
        "rule": rule,
        "severity": severity,
        "first_fired": fired,
        "last_fired": fired + dt.timedelta(minutes=5),
        "value": 1234.5,
        "threshold": 1000.0,
    }


def _inventory() -> list[dict[str, Any]]:
    return [
        {
            "window_start": T0,
            "window_end": T0 + dt.timedelta(hours=1),
            "client_id": client_id,
            "client_instance_id": instance,
            "client_software_name": "confluent-kafka-python",
            "client_software_version": "2.16.1-rdkafka-2.16.0",
            "client_type": kind,
            "principal": "User:alice" if kind == "producer" else "User:bob",
            "ingest_node": "node-a",
            "pushes": 1800,
            "points": 1800 * 40,
            "first_seen": T0,
            "last_seen": T0 + dt.timedelta(minutes=59),
        }
        for client_id, instance, kind, _ in CLIENTS
    ]


def _quota_advice() -> list[dict[str, Any]]:
    """quota_advice_1h: fast-producer's produce demand in two hours, slow-producer's pushes."""
    hour = dt.timedelta(hours=1)

    def row(
        start: dt.datetime,
        quota: str,
        user: str,
        client: str,
        peak: float,
        mean: float,
        minutes: int,
    ) -> dict[str, Any]:
        return {
            "window_start": start, "window_end": start + hour, "quota": quota, "user": user,
            "client_id": client, "instances": 1, "minutes": minutes, "peak_byte_rate": peak,
            "mean_byte_rate": mean, "headroom": 1.5, "proposal_byte_rate": peak * 1.5,
        }  # fmt: skip

    return [
        row(T0, "producer_byte_rate", "alice", "fast-producer", 4000.0, 1000.0, 60),
        row(T0 + hour, "producer_byte_rate", "alice", "fast-producer", 2000.0, 400.0, 30),
        row(T0, "push_byte_rate", "bob", "slow-producer", 300.0, 200.0, 30),
    ]


def test_the_quota_advice_folds_the_hours_of_each_entity(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_tables(data, *_rows(), inventory=_inventory(), quota_advice=_quota_advice())
    out = tmp_path / "report.html"
    assert report_main(["--data-dir", str(data), "--out", str(out)]) == 0
    html = out.read_text()
    section = html[html.index('id="quota-advice"') : html.index('id="clients"')]
    # Two hours of alice's: the period's peak 4,000, the mean over 90 minutes
    # (1,000 x 60 + 400 x 30) / 90 = 800, proposal 4,000 x 1.5.
    assert (
        '<td class="text">producer_byte_rate</td><td class="text">alice</td>'
        '<td class="text">fast-producer</td><td>4,000</td><td>800</td><td>6,000</td><td>2</td>'
    ) in section
    assert "<td>300</td><td>200</td><td>450</td><td>1</td>" in section
    assert "quota_advice_1h" in html.split("</p>", 2)[0]  # among the tables read
    # Without the table the section says what to run.
    bare = tmp_path / "bare"
    write_tables(bare, *_rows(), inventory=_inventory())
    assert report_main(["--data-dir", str(bare), "--out", str(out)]) == 0
    assert "No <code>quota_advice_1h</code> table" in out.read_text()


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


def _screenshot(url: str, shot: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium")
    assert binary, "Debian's chromium package is needed (.ci/run installs it)"
    return subprocess.run(
        [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--force-device-scale-factor=1", f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={shot}", url,
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def test_the_report_opens_on_the_fleet_fits_1280_px_and_draws_every_chart(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    alerts = [
        _alert(0, "request_latency_high", "info", 10),
        _alert(1, "produce_throttled", "warning", 20),
        _alert(1, "software_known_bad", "critical", 5),
    ]
    write_tables(data, *_rows(), inventory=_inventory(), alerts=alerts)
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
    # Clients: worst state first (critical, info, healthy), then worst p99.
    table = html[html.index('<table id="health">') :]
    table = table[: table.index("</table>")]
    order = [table.index(client) for client in ("slow-producer", "fast-producer", "some-consumer")]
    assert order == sorted(order)
    # Alerts: worst severity first, with the shipped rule's meaning.
    section = html[html.index('id="alerts"') : html.index('id="throttled"')]
    severities = re.findall(r'class="text state-(\w+)">', section)
    assert severities == ["critical", "warning", "info"]
    throttled = html[html.index('id="throttled-clients"') :]
    throttled = throttled[: throttled.index("</table>")]
    assert "fast-producer" in throttled and "slow-producer" in throttled
    assert "some-consumer" not in throttled  # pushed no throttle time
    meaning = next(r.meaning for r in load_rules().rules if r.name == "software_known_bad")
    assert escape(meaning) in section
    # Counts are integers; an instance id in Kafka's form and in librdkafka's beside it.
    assert "<td>3,600</td>" in html  # the two producers' pushes in the inventory
    assert not re.search(r">\d+\.00<", html)
    slow_raw = base64.urlsafe_b64decode(CLIENTS[1][1] + "==")
    assert f"librdkafka logs: {base64.b64encode(slow_raw).decode().rstrip('=')}" in html
    assert "1000000" not in html  # the row outside the range is not charted

    page = asyncio.run(evaluate_in_page(out.as_uri(), MEASURE_REPORT, tmp_path / "p1", WINDOW))
    assert page["scrollWidth"] <= 1280
    assert page["sections"] == ["fleet", "alerts", "throttled", "quota-advice", "clients"]
    assert page["states"] == {"critical": 1, "warning": 0, "info": 1, "healthy": 1}
    charts = page["charts"]
    assert len(charts) == 4 + 4 + 5  # two producers' four charts, a consumer's five

    shot = tmp_path / "report.png"
    taken = _screenshot(out.as_uri(), shot, tmp_path / "p2")
    assert shot.exists(), taken.stderr
    image = Image.open(shot).convert("RGB")
    assert image.size == WINDOW
    pixels = image.load()
    assert pixels is not None
    first, second = _rgb(PALETTE[0]), _rgb(PALETTE[1])
    consumer = next(i for i, c in enumerate(charts) if c["title"] == "Fetch latency")
    for number, chart in enumerate(charts):
        chart_id, (left, top, width, height) = chart["id"], chart["box"]
        if top + height > WINDOW[1]:
            continue  # below the screenshot
        drawn = Counter(
            pixels[x, y]
            for x in range(int(left), int(left + width))
            for y in range(int(top), int(top + height))
        )
        # The consumer's fetch, rebalance and poll charts have no rows here: "no data".
        if consumer <= number < consumer + 3:
            assert drawn[first] == 0, chart_id
            assert len(drawn) > 1, chart_id  # the frame and its text are drawn
            continue
        # A legend square is 100 pixels; a line across the chart is many more.
        assert drawn[first] > 300, (chart_id, drawn[first])
        if chart_id.endswith("-0"):
            assert drawn[second] > 300, (chart_id, drawn[second])  # p99 beside p50


def _documented_queries() -> dict[str, str]:
    """docs/report.md's table: figure -> query."""
    doc = (Path(__file__).parents[2] / "docs" / "report.md").read_text()
    rows = re.findall(r"^\| (.+?) \| `(select .+)` \|$", doc, flags=re.MULTILINE)
    return dict(rows)


def _lake_query(data: Path, sql: str, capsys: pytest.CaptureFixture[str]) -> list[list[str]]:
    """``kip714 lake query`` in this process (it prints tab-separated rows under a header)."""
    capsys.readouterr()
    status = kip714_main(["lake", "--data-dir", str(data), "query", sql])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    return [line.split("\t") for line in printed.out.splitlines()[1:]]


def test_every_documented_query_runs_and_gives_the_numbers_the_report_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    alerts = [_alert(1, "produce_throttled", "warning", 20), _alert(1, "x", "critical", 5)]
    advice = [r for r in _quota_advice() if r["window_start"] == T0]  # the FROM..TO hour
    write_tables(data, *_rows(), inventory=_inventory(), alerts=alerts, quota_advice=advice)
    out = tmp_path / "report.html"
    assert report_main(["--data-dir", str(data), "--out", str(out)]) == 0
    html = out.read_text()
    queries = _documented_queries()
    assert len(queries) >= 8
    bounds = {"FROM": "'2026-11-25T10:00:00+00:00'", "TO": "'2026-11-25T11:00:00+00:00'"}
    # The fixture's finest gauge rollup is gauges_1m (the demo's is gauges_2s).
    names = {**bounds, "ID": f"'{CLIENTS[1][1]}'", "gauges_2s": "gauges_1m"}
    answers = {}
    for figure, query in queries.items():
        sql = query
        for name, value in names.items():
            sql = re.sub(rf"\b{name}\b", value, sql)
        answers[figure] = _lake_query(data, sql, capsys)
    software = answers["inventory by software: clients, pushes"]
    for kind, name, version, clients, pushes in software:
        cells = "".join(f'<td class="text long">{part}</td>' for part in (kind, name, version))
        assert f"{cells}<td>{int(clients):,}</td><td>{int(pushes):,}</td>" in html
    states = answers[next(f for f in queries if f.startswith("clients per health"))]
    [[state_client, state]] = states
    assert state_client == CLIENTS[1][1] and state == "critical"
    [[pushes, points]] = answers["a client's pushes, data points"]
    assert f"pushes {int(pushes):,} · data points {int(points):,}" in html
    health = answers[next(f for f in queries if f.startswith("a client's lat"))]
    [[p99, latency_max, _, _]] = health
    assert f"<td>{float(p99):.3g}</td><td>{float(latency_max):.3g}</td>" in html
    assert {row[0] for row in answers["throttled clients"]} == {"fast-producer", "slow-producer"}
    suggested = answers["quota advice: peak, mean, proposal B/s"]
    assert len(suggested) == 2
    for quota, user, client, peak, mean, proposal, hours in suggested:
        figures = "".join(f"<td>{float(v):,.0f}</td>" for v in (peak, mean, proposal))
        assert (
            f'<td class="text">{quota}</td><td class="text">{user}</td>'
            f'<td class="text">{client}</td>{figures}<td>{hours}</td>'
        ) in html
    chart = answers[next(f for f in queries if f.startswith("a chart's series"))]
    assert len(chart) == 30  # one point per minute of the fixture, as the chart draws
