"""``kip714 serve`` stopped by SIGTERM under load: bounded, and still exactly once; exit status."""

from __future__ import annotations

import asyncio
import collections
import json
import random
import threading
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from tests.exporters.lake_support import read_table
from tests.telemetry.serve_process import ServeProcess
from tests.telemetry.server.landing_support import (
    POINTS_PER_PUSH,
    _push_until_stopped,
    wait_until,
)

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 100
[exporters.landing]
type = "iceberg"
drain_timeout_s = {drain}
[exporters.landing.options]
max_file_age_s = {age}
max_pending_rows = {rows}
"""


def config(drain: float, age: float = 0.3, rows: int = 150) -> str:
    return CONFIG.format(drain=drain, age=age, rows=rows)


def landed(data: Path) -> list[dict[str, Any]]:
    """The committed ``metrics`` rows of the lake under ``data`` (what any reader sees)."""
    table = read_table(data)
    if not table.num_rows:
        return []
    rows: list[dict[str, Any]] = table.select(["push_offset", "metric_name"]).to_pylist()
    return rows


def readyz(server: ServeProcess) -> tuple[int, dict[str, Any]]:
    url = f"http://{server.http[0]}:{server.http[1]}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def assert_each_push_landed_once(data: Path, acknowledged: set[str]) -> None:
    rows = landed(data)
    per_name = collections.Counter(r["metric_name"] for r in rows)
    assert all(per_name[name] == POINTS_PER_PUSH for name in acknowledged)
    assert set(per_name.values()) == {POINTS_PER_PUSH}
    per_offset = collections.Counter(r["push_offset"] for r in rows)
    assert set(per_offset.values()) == {POINTS_PER_PUSH}
    assert len(per_offset) == len(per_name)


def test_sigterm_under_load_with_a_tiny_drain_timeout_lands_every_push_exactly_once(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    # A drain and flush bound of 1 ms: every stop cuts the drain short, and a
    # flush with a generation pending is cancelled while committing.
    text = config(drain=0.001)
    rng = random.Random(7140)
    acknowledged: set[str] = set()
    stopped_short = 0
    for run in range(3):
        server = ServeProcess(tmp_path / "data", text).start()
        stop = threading.Event()
        loader = threading.Thread(
            target=lambda s=server, r=run, e=stop: asyncio.run(
                _push_until_stopped(s, acknowledged, 10, e, r)
            ),
            daemon=True,
        )
        loader.start()
        time.sleep(rng.uniform(1.0, 2.5))
        assert server.stop() == 0  # SIGTERM at a random moment under load; exits in time
        stop.set()
        loader.join(30)
        assert not loader.is_alive()
        events = [e.get("event", "") for e in server.events()]
        stopped_short += sum("did not drain" in e or "did not flush" in e for e in events)
        assert any("kip714 stopped" in e for e in events)
    assert stopped_short >= 1
    assert len(acknowledged) >= 100

    final = ServeProcess(data, config(drain=5.0)).start()
    try:
        assert wait_until(lambda: acknowledged <= {r["metric_name"] for r in landed(data)}, 30)
        assert final.stop() == 0
    finally:
        final.kill()
    assert_each_push_landed_once(data, acknowledged)
