"""``kip714 serve`` with the Parquet landing: real clients in, Parquet out, exactly once."""

from __future__ import annotations

import asyncio
import collections
import random
import threading
import time
import urllib.request
from typing import TYPE_CHECKING, Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq

from telemetry.errors import ErrorCode
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.serve_process import ServeProcess, run_clients
from tests.telemetry.server_support import exported_rows

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = {interval}
[exporters.landing]
type = "parquet"
[exporters.landing.options]
path = "{landing}"
max_file_age_s = {age}
max_rows_per_file = {rows}
[exporters.lines]
type = "jsonl"
[exporters.lines.options]
path = "{out}/kip714.jsonl"
"""
POINTS_PER_PUSH = 3


def config(tmp_path: Path, interval: int = 300, age: float = 1.0, rows: int = 100_000) -> str:
    return CONFIG.format(
        interval=interval, landing=tmp_path / "landing", age=age, rows=rows, out=tmp_path / "out"
    )


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def landed(landing: Path) -> list[dict[str, Any]]:
    if not (landing / "metrics").exists():
        return []
    table = ds.dataset(landing / "metrics", format="parquet", partitioning="hive").to_table(
        columns=["push_offset", "metric_name", "client_id", "terminating", "value", "date", "hour"]
    )
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def jsonl_rows(out: Path) -> list[dict[str, Any]]:
    return exported_rows(out / "kip714.jsonl")


def every_file_is_whole(landing: Path) -> int:
    total = 0
    for path in landing.rglob("*.parquet"):
        assert "_landing" not in path.parts
        total += pq.read_table(path).num_rows
    return total


def test_real_clients_land_every_acknowledged_data_point_in_parquet(tmp_path: Path) -> None:
    landing, out = tmp_path / "landing", tmp_path / "out"
    server = ServeProcess(tmp_path / "data", config(tmp_path)).start()
    try:
        run_clients(
            server.bootstrap, 2.5, "pq", admin=False, landed=out / "kip714.jsonl", interval_ms=300
        )
        assert wait_until(lambda: any(r["terminating"] for r in jsonl_rows(out)))
        with urllib.request.urlopen(f"http://{server.http[0]}:{server.http[1]}/metrics") as r:
            metrics = r.read().decode()
        assert 'kip714_exporter_lag_pushes{exporter="landing"}' in metrics
        assert server.stop() == 0  # SIGTERM: flush, publish, commit
    finally:
        server.kill()
    rows, lines = landed(landing), jsonl_rows(out)
    assert rows
    # The same data points as the acknowledged pushes (counted by the jsonl exporter).
    assert len(rows) == len(lines)
    assert collections.Counter(r["push_offset"] for r in rows) == collections.Counter(
        line["push_offset"] for line in lines
    )
    assert {r["client_id"] for r in rows} == {"pq-producer", "pq-consumer"}
    assert any(r["terminating"] for r in rows)
    assert every_file_is_whole(landing) == len(rows)
    assert not list((landing / "_landing" / "staging").iterdir())


async def _push_until_stopped(
    server: ServeProcess, acknowledged: set[str], clients: int, stop: threading.Event, run: int
) -> None:
    async def one(index: int) -> None:
        try:
            client = await WireClient.connect(*server.kafka, client_id=f"crash-{index}")
        except OSError:
            return
        try:
            await client.api_versions()
            answer = await client.subscribe()
            seq = 0
            while not stop.is_set() and seq < 300:
                name = f"crash.r{run}.c{index}.s{seq}"
                response = await client.push(
                    answer.client_instance_id,
                    answer.subscription_id,
                    otlp_payload(name, points=POINTS_PER_PUSH),
                )
                if response.error_code == ErrorCode.NONE:
                    acknowledged.add(name)
                seq += 1
                await asyncio.sleep(0.11)  # the 100 ms interval gate
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError):
            return  # killed under us
        finally:
            await client.close()

    await asyncio.gather(*(one(i) for i in range(clients)))


def test_sigkill_under_load_lands_every_acknowledged_push_exactly_once(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    # Small, frequent generations, so kills fall between publishing and committing.
    text = config(tmp_path, interval=100, age=0.3, rows=150)
    rng = random.Random(714)
    acknowledged: set[str] = set()
    deadline = time.monotonic() + 45
    kills = 0
    for run in range(3):
        if time.monotonic() > deadline:
            break
        server = ServeProcess(tmp_path / "data", text).start()
        stop = threading.Event()
        loader = threading.Thread(
            target=lambda s=server, r=run, e=stop: asyncio.run(
                _push_until_stopped(s, acknowledged, 10, e, r)
            ),
            daemon=True,
        )
        loader.start()
        time.sleep(rng.uniform(1.0, 3.0))
        server.kill()  # SIGKILL at a random moment under load
        kills += 1
        stop.set()
        loader.join(30)
        assert not loader.is_alive()
    assert kills >= 2
    assert len(acknowledged) >= 100

    final = ServeProcess(tmp_path / "data", text).start()
    try:

        def all_landed() -> bool:
            names = {r["metric_name"] for r in landed(landing)}
            return acknowledged <= names

        assert wait_until(all_landed, 30)
        assert final.stop() == 0
    finally:
        final.kill()
    rows = landed(landing)
    per_name = collections.Counter(r["metric_name"] for r in rows)
    # Every acknowledged push exactly once (POINTS_PER_PUSH rows each); pushes logged but
    # not acknowledged before a kill may land too, but also exactly once.
    assert all(per_name[name] == POINTS_PER_PUSH for name in acknowledged)
    assert set(per_name.values()) == {POINTS_PER_PUSH}
    per_offset = collections.Counter(r["push_offset"] for r in rows)
    assert set(per_offset.values()) == {POINTS_PER_PUSH}
    assert len(per_offset) == len(per_name)
    assert every_file_is_whole(landing) == len(rows)
