"""A lost ingest log under a kept landing: refused at start, or landed as a new offset epoch."""

from __future__ import annotations

import asyncio
import collections
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from telemetry.errors import ErrorCode
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 100
[exporters.landing]
type = "parquet"
[exporters.landing.options]
max_file_age_s = 0.3
"""
POINTS = 2


async def _push(server: ServeProcess, names: list[str]) -> None:
    client = await WireClient.connect(*server.kafka, client_id="identity")
    try:
        await client.api_versions()
        answer = await client.subscribe()
        for name in names:
            response = await client.push(
                answer.client_instance_id, answer.subscription_id, otlp_payload(name, POINTS)
            )
            assert response.error_code == ErrorCode.NONE, response
            await asyncio.sleep(0.11)  # the 100 ms interval gate
    finally:
        await client.close()


def run_and_push(data: Path, config: str, names: list[str]) -> None:
    """Start serve on ``data``, push ``names`` (each acknowledged), stop with SIGTERM."""
    server = ServeProcess(data, config).start()
    try:
        asyncio.run(_push(server, names))
        assert server.stop() == 0
    finally:
        server.kill()


def landed(data: Path) -> dict[Path, list[tuple[int, str]]]:
    """Every published file with its ``(push_offset, metric_name)`` rows."""
    files = sorted(p for p in (data / "metrics").rglob("*.parquet"))
    return {
        p: list(
            zip(
                *pq.read_table(p, columns=["push_offset", "metric_name"]).to_pydict().values(),
                strict=True,
            )
        )
        for p in files
    }


def landing_files(data: Path) -> dict[str, bytes]:
    return {
        p.relative_to(data).as_posix(): p.read_bytes()
        for p in sorted(data.rglob("*"))
        if p.is_file()
        and "log" not in p.relative_to(data).parts[:1]
        and p.name not in {"lock", "kip714.lock"}  # the landing's and the data directory's locks
    }


def test_a_deleted_log_is_refused_then_lands_as_a_new_epoch(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first_names = [f"identity.first.{i}" for i in range(3)]
    run_and_push(data, CONFIG, first_names)
    old_id = (data / "log" / "log_id").read_text().strip()
    before = landed(data)
    assert sorted(name for rows in before.values() for _, name in rows) == sorted(
        n for n in first_names for _ in range(POINTS)
    )
    kept = landing_files(data)

    shutil.rmtree(data / "log")  # the ingest log is lost; metrics/ and _landing/ stay
    config_path = tmp_path / "refused.toml"
    config_path.write_text(CONFIG)
    result = subprocess.run(
        [sys.executable, "-m", "telemetry", "serve", "--config", str(config_path),
         "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
         "--data-dir", str(data), "--log-format", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    new_id = (data / "log" / "log_id").read_text().strip()
    assert new_id != old_id
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("kip714: cannot start: exporters.landing could not start: ")
    assert old_id in line
    assert new_id in line
    assert "new_log_epoch = true" in line
    assert landing_files(data) == kept  # nothing deleted, nothing written

    second_names = [f"identity.second.{i}" for i in range(4)]
    run_and_push(data, CONFIG + "new_log_epoch = true\n", second_names)
    # A restart without the option resumes the new epoch, replays nothing.
    run_and_push(data, CONFIG, [])
    after = landed(data)
    for path, rows in before.items():
        assert after[path] == rows
        assert path.read_bytes() == kept[path.relative_to(data).as_posix()]
    new_files = [p for p in after if p not in before]
    assert new_files
    assert all(p.name.startswith("part-e000001-") for p in new_files)
    new_rows = [row for p in new_files for row in after[p]]
    assert collections.Counter(name for _, name in new_rows) == dict.fromkeys(second_names, POINTS)
    # The new log's offsets start again at 0; each push landed once.
    offsets = collections.Counter(offset for offset, _ in new_rows)
    assert offsets == dict.fromkeys(range(len(second_names)), POINTS)
