"""One owner per data directory: a second ``kip714 serve`` is refused before it opens anything."""

from __future__ import annotations

import asyncio
import collections
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from telemetry.errors import ErrorCode
from telemetry.server.data_dir_lock import LOCK_FILE, DataDirLock, DataDirLockedError, holder
from tests.exporters.lake_support import read_table
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 100
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
workers = 1
max_file_age_s = 0.5
"""


def test_a_second_lock_names_the_holder_and_a_released_lock_is_free(tmp_path: Path) -> None:
    data_dir = tmp_path / "a" / "b"
    assert holder(data_dir) is None
    assert not data_dir.exists()  # probing creates nothing
    lock = DataDirLock.acquire(data_dir)
    try:
        assert (data_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        assert holder(data_dir) == os.getpid()
        with pytest.raises(DataDirLockedError) as refused:
            DataDirLock.acquire(data_dir)
        assert refused.value.holder_pid == os.getpid()
        assert str(data_dir) in str(refused.value)
    finally:
        lock.release()
    lock.release()  # idempotent
    assert holder(data_dir) is None
    again = DataDirLock.acquire(data_dir)
    assert again.held
    again.release()
    assert not again.held


async def push_names(server: ServeProcess, names: list[str]) -> list[str]:
    """Push one metric per name through the Kafka listener; return those acknowledged."""
    client = await WireClient.connect(*server.kafka, client_id="owner-test")
    acknowledged = []
    try:
        await client.api_versions()
        answer = await client.subscribe()
        for name in names:
            response = await client.push(
                answer.client_instance_id, answer.subscription_id, otlp_payload(name)
            )
            if response.error_code == ErrorCode.NONE:
                acknowledged.append(name)
            await asyncio.sleep(0.11)  # the subscription's 100 ms push interval
    finally:
        await client.close()
    return acknowledged


def serve_command(data_dir: Path, config: Path) -> list[str]:
    return [
        sys.executable, "-m", "telemetry", "serve", "--config", str(config),
        "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
        "--data-dir", str(data_dir), "--log-format", "json",
    ]  # fmt: skip


def test_a_second_server_on_the_same_directory_exits_2_and_the_first_keeps_serving(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    first = ServeProcess(data_dir, CONFIG.format(data=data_dir)).start()
    try:
        assert first.process is not None and first.config_path is not None
        acknowledged = asyncio.run(push_names(first, [f"owner.before.{i}" for i in range(5)]))
        log_bytes = sum(p.stat().st_size for p in (data_dir / "log").glob("*.log"))

        second = subprocess.run(
            serve_command(data_dir, first.config_path),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert second.returncode == 2
        assert second.stdout == ""
        (line,) = second.stderr.strip().splitlines()
        assert line == (
            f"kip714: data directory {data_dir} is in use by another kip714 "
            f"(pid {first.process.pid}); stop it or use another --data-dir"
        )
        # The refused server opened nothing: the log was not recovered under the first.
        assert sum(p.stat().st_size for p in (data_dir / "log").glob("*.log")) == log_bytes

        acknowledged += asyncio.run(push_names(first, [f"owner.after.{i}" for i in range(5)]))
        assert first.stop() == 0
    finally:
        first.kill()
    assert len(acknowledged) == 10
    names = read_table(data_dir).column("metric_name").to_pylist()
    landed = collections.Counter(names)
    assert landed == collections.Counter(acknowledged)  # every acknowledged push, once
    assert len(names) == 10
    assert not any('"torn' in line or "truncating" in line for line in first.lines)

    # A clean stop released the lock: the next server starts and owns the directory.
    third = ServeProcess(data_dir, CONFIG.format(data=data_dir)).start()
    try:
        assert third.process is not None
        assert holder(data_dir) == third.process.pid
        assert third.stop() == 0
    finally:
        third.kill()
    assert holder(data_dir) is None
