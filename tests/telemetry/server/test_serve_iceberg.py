"""``kip714 serve`` with the Iceberg landing: several nodes, one table, exactly once."""

from __future__ import annotations

import asyncio
import collections
import random
import threading
import time
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest
import zstandard
from pyiceberg.catalog import load_catalog

from telemetry.core.codecs import CompressionType
from telemetry.errors import ErrorCode
from tests.s3.s3proxy import ACCESS_KEY, CHECKSUM_ENV, REGION, SECRET_KEY, S3Proxy
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.serve_process import ServeProcess, run_clients
from tests.telemetry.server.landing_support import (
    POINTS_PER_PUSH,
    _push_until_stopped,
    jsonl_rows,
    wait_until,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from telemetry.wire import PushTelemetryResponse

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = {interval}
[server]
node_id = "{node}"
[lake]
catalog = {{ type = "sql", uri = "sqlite:///{lake}/catalog.db" }}
warehouse = "{warehouse}"
{extra}
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
max_file_age_s = {age}
"""
NODES = ("node-a", "node-b", "node-c")


def node_config(
    lake: Path, node: str, warehouse: str | None = None, extra: str = "", age: float = 0.3
) -> str:
    return CONFIG.format(
        interval=100,
        node=node,
        lake=lake,
        warehouse=warehouse or f"file://{lake}/warehouse",
        extra=extra,
        age=age,
    )


def lake_rows(lake: Path, storage: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every committed row of the shared table (what any reader of the table sees)."""
    catalog = load_catalog(
        "kip714", type="sql", uri=f"sqlite:///{lake}/catalog.db", **dict(storage or {})
    )
    if not catalog.table_exists(("kip714", "metrics")):
        return []
    table = catalog.load_table(("kip714", "metrics"))
    columns = (
        "push_offset",
        "metric_name",
        "ingest_node",
        "client_id",
        "terminating",
        "push_bytes",
        "push_decoded_bytes",
        "log_partition",
    )
    rows: list[dict[str, Any]] = table.scan(selected_fields=columns).to_arrow().to_pylist()
    return rows


def kill_rounds_then_check(
    tmp_path: Path,
    configs: Mapping[str, str],
    rows_of: Any,
    rounds: int = 3,
) -> None:
    """Three rounds of load on every node, each node SIGKILLed at a random moment; then
    every acknowledged push must be in the table exactly once."""
    rng = random.Random(714)
    acknowledged: set[str] = set()
    for run in range(rounds):
        servers = {n: ServeProcess(tmp_path / n, text).start() for n, text in configs.items()}
        stops, loaders = [], []
        for index, server in enumerate(servers.values()):
            stop = threading.Event()
            loader = threading.Thread(
                target=lambda s=server, r=run * 10 + index, e=stop: asyncio.run(
                    _push_until_stopped(s, acknowledged, 4, e, r)
                ),
                daemon=True,
            )
            loader.start()
            stops.append(stop)
            loaders.append(loader)
        for server in servers.values():
            # Each node acknowledges some pushes first (bounded: a loaded machine is slower),
            # then dies at a random moment.
            wanted = len(acknowledged) + 60
            deadline = time.monotonic() + 60
            while len(acknowledged) < wanted and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.0))
            server.kill()  # SIGKILL at a random moment under load
        for stop, loader in zip(stops, loaders, strict=True):
            stop.set()
            loader.join(30)
            assert not loader.is_alive()
    assert len(acknowledged) >= 100

    finals = {n: ServeProcess(tmp_path / n, text).start() for n, text in configs.items()}
    try:

        def all_landed() -> bool:
            return acknowledged <= {r["metric_name"] for r in rows_of()}

        assert wait_until(all_landed, 40)
        for server in finals.values():
            assert server.stop() == 0
    finally:
        for server in finals.values():
            server.kill()
    rows = rows_of()
    per_name = collections.Counter(r["metric_name"] for r in rows)
    # Every acknowledged push exactly once; pushes logged but not acknowledged before
    # a kill may land too, but also exactly once.
    assert all(per_name[name] == POINTS_PER_PUSH for name in acknowledged)
    assert set(per_name.values()) == {POINTS_PER_PUSH}
    # By offset: offsets are per node (each has its own ingest log).
    per_offset = collections.Counter((r["ingest_node"], r["push_offset"]) for r in rows)
    assert set(per_offset.values()) == {POINTS_PER_PUSH}
    assert len(per_offset) == len(per_name)
    assert {r["ingest_node"] for r in rows} == set(configs)


def test_three_nodes_land_every_acknowledged_push_once_across_kill_9(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    configs = {n: node_config(lake, n) for n in NODES}
    kill_rounds_then_check(tmp_path, configs, lambda: lake_rows(lake))
    catalog = load_catalog("kip714", type="sql", uri=f"sqlite:///{lake}/catalog.db")
    table = catalog.load_table(("kip714", "metrics"))
    nodes = {
        s.summary.additional_properties.get("kip714.node-id")
        for s in table.snapshots()
        if s.summary is not None
    }
    assert nodes == set(NODES)


DEFAULT_LAKE = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 300
[exporters.landing]
type = "iceberg"
[exporters.lines]
type = "jsonl"
[exporters.lines.options]
path = "{out}/kip714.jsonl"
"""


def test_real_clients_land_in_the_default_lake_of_the_data_dir(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    server = ServeProcess(data, DEFAULT_LAKE.format(out=out)).start()
    try:
        run_clients(
            server.bootstrap, 2.5, "ice", admin=False, landed=out / "kip714.jsonl", interval_ms=300
        )
        assert wait_until(lambda: any(r["terminating"] for r in jsonl_rows(out)))
        assert server.stop() == 0  # SIGTERM: the last generation is committed
    finally:
        server.kill()
    rows, lines = lake_rows(data / "lake"), jsonl_rows(out)
    node_id = (data / "node_id").read_text().strip()
    assert {r["ingest_node"] for r in rows} == {node_id}
    assert {r["client_id"] for r in rows} == {"ice-producer", "ice-consumer"}
    assert any(r["terminating"] for r in rows)
    # The same data points as the acknowledged pushes (counted by the jsonl exporter).
    assert collections.Counter(r["push_offset"] for r in rows) == collections.Counter(
        line["push_offset"] for line in lines
    )


def test_each_row_carries_its_push_size_as_sent_and_decompressed(tmp_path: Path) -> None:
    """Issue 42: the demand of push_byte_rate and push_decoded_byte_rate, per row of a push."""
    data = tmp_path / "data"
    raw = otlp_payload("org.apache.kafka.producer.bytes", points=3)
    sent = zstandard.compress(raw)
    assert len(sent) != len(raw)
    server = ServeProcess(data, DEFAULT_LAKE.format(out=tmp_path / "out")).start()

    async def push() -> PushTelemetryResponse:
        client = await WireClient.connect(*server.kafka, "sizes")
        try:
            subscribed = await client.subscribe()
            return await client.push(
                subscribed.client_instance_id,
                subscribed.subscription_id,
                sent,
                CompressionType.ZSTD,
            )
        finally:
            await client.close()

    try:
        assert asyncio.run(push()).error_code == ErrorCode.NONE
        assert server.stop() == 0  # SIGTERM: the generation is committed
    finally:
        server.kill()
    rows = lake_rows(data / "lake")
    assert len(rows) == 3
    assert {(r["push_bytes"], r["push_decoded_bytes"]) for r in rows} == {(len(sent), len(raw))}
    assert {r["log_partition"] for r in rows} == {None}  # the local log


def test_three_nodes_exactly_once_with_the_warehouse_on_a_real_s3_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in CHECKSUM_ENV.items():
        monkeypatch.setenv(key, value)  # this process and the servers it starts
    s3 = S3Proxy(tmp_path / "s3").start()
    try:
        s3.create_bucket("kip714")
        lake = tmp_path / "lake"
        lake.mkdir()
        extra = "\n".join(f'{key} = "{value}"' for key, value in s3.lake_options().items())
        configs = {
            n: node_config(lake, n, warehouse="s3://kip714/warehouse", extra=extra) for n in NODES
        }
        storage = {
            "s3.endpoint": s3.endpoint,
            "s3.region": REGION,
            "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": SECRET_KEY,
            "s3.force-virtual-addressing": "false",
        }
        kill_rounds_then_check(tmp_path, configs, lambda: lake_rows(lake, storage))
        # The data files are objects in the bucket, not local files.
        objects = list((tmp_path / "s3" / "buckets" / "kip714").rglob("*.parquet"))
        assert objects
        assert not list(lake.rglob("*.parquet"))
    finally:
        s3.stop()


MAINTAINED_LAKE = """
[lake]
retention_hours = 1000
[exporters.landing]
type = "iceberg"
"""


def test_table_maintenance_is_counted_on_metrics(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "data", MAINTAINED_LAKE).start()
    url = f"http://{server.http[0]}:{server.http[1]}/metrics"
    stat = 'kip714_exporter_stat{exporter="landing",stat="maintenance_passes"}'

    def passes() -> float:
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = str(answer.read().decode())
        lines = [line for line in text.splitlines() if line.startswith(stat)]
        return float(lines[0].split()[-1]) if lines else 0.0

    try:
        # The first pass runs at start; its counters reach /metrics with the exporter's.
        assert wait_until(lambda: passes() >= 1.0)
        assert server.stop() == 0
    finally:
        server.kill()
