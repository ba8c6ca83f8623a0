"""The landing survives its catalog's and its warehouse's bad moments, by itself.

A real SQLite catalog held locked by another connection, then a real tiny
file system (tmpfs) under the warehouse filled to the last byte: the server
keeps acknowledging pushes (the ingest log is elsewhere), ``/readyz`` says the
landing is failing, each streak is counted and logged once, and when the lock
is released or the space is freed the landing resumes without a restart and
every acknowledged push is in the table exactly once.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import sqlite3
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from telemetry.errors import ErrorCode
from tests.exporters.lake_support import read_table
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.serve_process import ServeProcess
from tests.telemetry.server.landing_support import POINTS_PER_PUSH, wait_until
from tests.telemetry.tiny_fs import fill, tiny_fs

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 100
[lake]
warehouse = "{warehouse}"
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
max_file_age_s = 0.2
workers = 1
"""
STAT = re.compile(r'^kip714_exporter_stat\{exporter="landing",stat="(\w+)"\} (\S+)$', re.M)


def readyz(server: ServeProcess) -> tuple[int, dict[str, Any]]:
    url = f"http://{server.http[0]}:{server.http[1]}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def stats(server: ServeProcess) -> dict[str, float]:
    url = f"http://{server.http[0]}:{server.http[1]}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {name: float(value) for name, value in STAT.findall(text)}


def failing(server: ServeProcess) -> bool:
    status, body = readyz(server)
    return status == 503 and any("landing is failing" in r for r in body["reasons"])


def ready(server: ServeProcess) -> bool:
    return readyz(server)[0] == 200


async def _push(server: ServeProcess, names: list[str]) -> set[str]:
    client = await WireClient.connect(*server.kafka, client_id="faults")
    acknowledged: set[str] = set()
    try:
        answer = await client.subscribe()
        for name in names:
            await asyncio.sleep(0.11)  # the 100 ms interval gate
            response = await client.push(
                answer.client_instance_id,
                answer.subscription_id,
                otlp_payload(name, points=POINTS_PER_PUSH),
            )
            if response.error_code == ErrorCode.NONE:
                acknowledged.add(name)
    finally:
        await client.close()
    return acknowledged


def landed_names(data: Path) -> collections.Counter[str]:
    table = read_table(data)
    names = table.column("metric_name").to_pylist() if table.num_rows else []
    return collections.Counter(names)


def test_a_locked_catalog_and_a_full_warehouse_are_survived_without_a_restart(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with tiny_fs(tmp_path / "warehouse", 4 * 1024 * 1024) as warehouse:
        server = ServeProcess(data, CONFIG.format(warehouse=warehouse)).start()
        try:
            assert wait_until(lambda: ready(server), 60)
            acknowledged = asyncio.run(_push(server, [f"before.{n}" for n in range(3)]))
            assert wait_until(lambda: acknowledged <= set(landed_names(data)), 60)

            # 1. Another connection holds the SQLite catalog locked: commits fail.
            lock = sqlite3.connect(data / "lake" / "catalog.db", isolation_level=None)
            lock.execute("BEGIN EXCLUSIVE")
            try:
                locked = asyncio.run(_push(server, [f"locked.{n}" for n in range(8)]))
                assert len(locked) == 8  # the log acknowledges them meanwhile
                assert wait_until(lambda: failing(server), 60)
                assert wait_until(lambda: stats(server)["failures"] >= 2, 60)
                assert stats(server)["failure_streaks"] == 1  # the table cannot be read now
            finally:
                lock.execute("ROLLBACK")
                lock.close()
            acknowledged |= locked
            assert wait_until(lambda: acknowledged <= set(landed_names(data)), 90)
            assert wait_until(lambda: ready(server), 30)

            # 2. The warehouse's file system is full: data files cannot be written.
            filler = fill(warehouse)
            try:
                full = asyncio.run(_push(server, [f"full.{n}" for n in range(8)]))
                assert len(full) == 8
                assert wait_until(lambda: failing(server), 60)
                assert wait_until(lambda: stats(server)["failures"] >= 4, 60)
                assert stats(server)["failure_streaks"] == 2
                assert not set(landed_names(data)) & full
            finally:
                filler.unlink()
            acknowledged |= full
            assert wait_until(lambda: acknowledged <= set(landed_names(data)), 120)
            assert wait_until(lambda: ready(server), 30)
            assert server.stop() == 0  # never fail-stopped: SIGTERM exits 0
        finally:
            server.kill()
        per_name = landed_names(data)  # while the warehouse is still mounted
    events = [e.get("event", "") for e in server.events()]
    # One error line per streak from the landing, one recovery line after each.
    assert sum("retrying with backoff from offset" in e for e in events) == 2
    assert sum("recovered: committed again" in e for e in events) == 2
    assert all(per_name[name] == POINTS_PER_PUSH for name in acknowledged)
    assert set(per_name.values()) == {POINTS_PER_PUSH}  # each push exactly once
