"""Exporters add to the Iceberg landing; subscriptions say what they collect (issue 36, item 1)."""

from __future__ import annotations

import collections
import logging
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from telemetry.errors import ConfigError
from telemetry.server.config import load_settings
from tests.telemetry.server.test_serve_iceberg import lake_rows
from tests.telemetry.server_support import INTERVAL_MS, get, push_names, running

if TYPE_CHECKING:
    from pathlib import Path

SUBSCRIBE_ALL = f"""
[subscriptions.all]
metrics = ["*"]
"interval.ms" = {INTERVAL_MS}
"""
LINES = """
[exporters.lines]
type = "jsonl"
"""
POINTS = 3


def _names(tmp_path: Path) -> collections.Counter[str]:
    return collections.Counter(row["metric_name"] for row in lake_rows(tmp_path / "data" / "lake"))


async def test_an_added_exporter_keeps_the_landing(tmp_path: Path) -> None:
    async with running(tmp_path, SUBSCRIBE_ALL + LINES) as server:
        status, body = await get(server, "/readyz")
        assert status == 200
        assert body["exporters"] == {"landing": "iceberg", "lines": "jsonl"}
        assert await push_names(server, ["added.a", "added.b"], points=POINTS) == [
            "added.a",
            "added.b",
        ]
    # The stop flushed the landing: both pushes are in the lake.
    assert _names(tmp_path) == {"added.a": POINTS, "added.b": POINTS}


async def test_the_landing_back_after_a_pause_lands_each_push_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(tmp_path, SUBSCRIBE_ALL + LINES) as server:
        await push_names(server, ["once.a", "once.b"], points=POINTS)
    off = SUBSCRIBE_ALL + LINES + "[exporters.landing]\nenabled = false\n"
    with caplog.at_level(logging.WARNING):
        async with running(tmp_path, off) as server:
            assert [h.name for h in server.hosts] == ["lines"]
            await push_names(server, ["once.c"], points=POINTS)
    forgotten = [r.getMessage() for r in caplog.records if "exporter landing" in r.getMessage()]
    assert forgotten, "the forgotten landing position is not logged at WARNING"
    assert "no longer configured" in forgotten[0]
    # Back to a config without [exporters.landing]: the landing returns and
    # resumes from the table's last committed offset, so nothing lands twice.
    async with running(tmp_path, SUBSCRIBE_ALL + LINES) as server:
        await push_names(server, ["once.d"], points=POINTS)
    assert _names(tmp_path) == dict.fromkeys(("once.a", "once.b", "once.c", "once.d"), POINTS)


def test_landing_is_reserved_and_can_be_tuned_or_turned_off(tmp_path: Path) -> None:
    path = tmp_path / "k.toml"
    path.write_text('[exporters.landing]\ntype = "jsonl"\n')
    with pytest.raises(ConfigError, match="reserved for the Iceberg landing"):
        load_settings(path)
    path.write_text("[exporters.landing]\nbatch_max_records = 7\n")
    (landing,) = load_settings(path).exporters
    assert (landing.name, landing.type, landing.batch_max_records) == ("landing", "iceberg", 7)
    path.write_text("[exporters.landing]\nenabled = false\n" + LINES)
    assert [e.name for e in load_settings(path).exporters] == ["lines"]
    path.write_text('[exporters.landing]\nenabled = "no"\n')
    with pytest.raises(ConfigError, match=r"exporters\.landing\.enabled"):
        load_settings(path)
    # An iceberg exporter of the file's own replaces the default landing.
    path.write_text('[exporters.lake]\ntype = "iceberg"\n')
    assert [(e.name, e.type) for e in load_settings(path).exporters] == [("lake", "iceberg")]


def test_two_landings_on_one_table_are_refused_at_start(tmp_path: Path) -> None:
    config = tmp_path / "k.toml"
    config.write_text('[exporters.landing]\n[exporters.again]\ntype = "iceberg"\n')
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "telemetry",
            "serve",
            "--config",
            str(config),
            "--data-dir",
            str(tmp_path / "data"),
            "--kafka-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "exporters.again" in lines[0]
    assert "same table as exporters.landing" in lines[0]
    # Another namespace is another table: both may run.
    config.write_text(
        '[exporters.landing]\n[exporters.again]\ntype = "iceberg"\n'
        '[exporters.again.options]\nnamespace = "other"\n'
    )
    assert [e.name for e in load_settings(config).exporters] == ["landing", "again"]


async def test_the_serving_line_names_subscriptions_and_warns_of_an_unmatched_kind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = """
[subscriptions.producers]
metrics = ["org.apache.kafka.producer."]
"interval.ms" = 60000
"""
    with caplog.at_level(logging.INFO):
        async with running(tmp_path, config):
            pass
    messages = [r.getMessage() for r in caplog.records]
    (serving,) = [m for m in messages if m.startswith("kip714 serving")]
    assert "subscriptions=producers[org.apache.kafka.producer.]@60000ms" in serving
    assert "exporters=landing(iceberg" in serving
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("consumer metrics" in w and "kip714.toml" in w for w in warnings), warnings
    assert not any("producer metrics" in w for w in warnings), warnings
