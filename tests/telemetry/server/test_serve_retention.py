"""``kip714 serve`` with rollup retention: old rollup hours go, recent ones stay, counted."""

from __future__ import annotations

import datetime as dt
import time
import urllib.request
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from telemetry.errors import ConfigError
from telemetry.server.config import load_settings
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = """
[rollups]
retention_hours = 24
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
workers = 1
"""


def make_hour(table: Path, hours_ago: int) -> Path:
    when = dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours_ago)
    directory = table / f"date={when:%Y-%m-%d}" / f"hour={when:%H}"
    directory.mkdir(parents=True)
    pq.write_table(pa.table({"value": [1.0, 2.0]}), directory / "part-0.parquet")
    return directory


def metric_value(metrics: str, sample: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{sample} not in /metrics")


def test_serve_deletes_expired_rollup_hours(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    old_rollup = make_hour(data_dir / "rollups" / "gauges_1m", 50)
    new_rollup = make_hour(data_dir / "rollups" / "gauges_1m", 2)
    other_rollup = make_hour(data_dir / "rollups" / "sums_1h", 30)
    checkpoint = make_hour(data_dir / "rollups" / "_checkpoints" / "gauges_1m", 100)

    server = ServeProcess(data_dir, CONFIG.format(data=data_dir)).start()
    try:
        gone = (old_rollup, other_rollup)
        partitions = "kip714_retention_deleted_partitions_total"
        # An hour vanishes from its listing before its pass is counted: wait for both.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with urllib.request.urlopen(
                f"http://{server.http[0]}:{server.http[1]}/metrics", timeout=10
            ) as response:
                metrics = response.read().decode()
            counted = f'{partitions}{{dataset="rollups"}} 2.0' in metrics
            if counted and not any(path.exists() for path in gone):
                break
            time.sleep(0.05)
        assert server.stop() == 0
    finally:
        server.kill()
    assert not any(path.exists() for path in gone)
    assert new_rollup.exists() and checkpoint.exists()
    assert metric_value(metrics, f'{partitions}{{dataset="rollups"}}') == 2
    assert metric_value(metrics, 'kip714_retention_deleted_bytes_total{dataset="rollups"}') > 0
    assert metric_value(metrics, 'kip714_retention_failures_total{dataset="rollups"}') == 0
    deleted = [e for e in server.events() if "retention deleted" in e.get("event", "")]
    assert len(deleted) == 2
    assert all(e["level"] == "info" for e in deleted)


def test_rollup_retention_is_off_unless_configured(tmp_path: Path) -> None:
    assert load_settings().rollups_retention_hours is None
    config = tmp_path / "k.toml"
    config.write_text("[rollups]\nretention_hours = 168\n")
    assert load_settings(config).rollups_retention_hours == 168


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[rollups]\nretention_hours = 0", "rollups.retention_hours"),
        ('[rollups]\nretention_hours = "7d"', "rollups.retention_hours"),
        ("[rollups]\nkeep = 1", "rollups.keep"),
    ],
)
def test_bad_rollup_retention_is_refused(tmp_path: Path, text: str, key: str) -> None:
    config = tmp_path / "k.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert caught.value.key == key
