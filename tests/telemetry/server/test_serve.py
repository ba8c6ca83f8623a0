"""``kip714 serve`` end to end: real librdkafka clients in, exporter output out, durably."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from telemetry.errors import ErrorCode
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.serve_process import ServeProcess, run_clients
from tests.telemetry.server_support import exported_rows

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 300
[exporters.debug]
type = "jsonl"
[exporters.debug.options]
path = "{out}/kip714.jsonl"
"""


def rows(out: Path) -> list[dict[str, Any]]:
    return exported_rows(out / "kip714.jsonl")


def fetch(server: ServeProcess, path: str) -> str:
    with urllib.request.urlopen(f"http://{server.http[0]}:{server.http[1]}{path}", timeout=10) as r:
        return str(r.read().decode())


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    out = tmp_path / "out"
    process = ServeProcess(tmp_path / "data", CONFIG.format(out=out)).start()
    yield process
    process.kill()


def test_real_clients_push_through_serve_to_the_exporter(
    server: ServeProcess, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    # Each client closed between two of its pushes: its terminating push is certain.
    run_clients(server.bootstrap, 2.5, "it", landed=out / "kip714.jsonl", interval_ms=300)
    clients = {"it-producer", "it-consumer", "it-admin"}
    assert wait_until(lambda: {r["client_id"] for r in rows(out) if r["terminating"]} >= clients), {
        c: sorted({r["terminating"] for r in rows(out) if r["client_id"] == c}) for c in clients
    }
    landed = rows(out)
    by_client = {c: [r for r in landed if r["client_id"] == c] for c in clients}
    assert all(by_client.values())
    assert all(r["client_software_name"] == "confluent-kafka-python" for r in landed)
    assert all(r["client_source_address"] == "127.0.0.1" for r in landed)
    assert all(
        r["metric_name"].startswith("org.apache.kafka.producer.") for r in by_client["it-producer"]
    )
    assert all(
        r["metric_name"].startswith("org.apache.kafka.consumer.") for r in by_client["it-consumer"]
    )
    assert len({r["client_instance_id"] for r in landed}) == 3
    # Several regular pushes per client before the terminating one.
    assert len({r["push_offset"] for r in by_client["it-producer"]}) >= 3

    health = json.loads(fetch(server, "/healthz"))
    assert health["ok"] is True
    metrics = fetch(server, "/metrics")
    accepted = [
        line for line in metrics.splitlines()
        if line.startswith('kip714_push_requests_total{error_code="NONE",outcome="accepted"}')
    ]  # fmt: skip
    assert accepted and float(accepted[0].split()[-1]) >= 6
    assert "kip714_log_fsync_seconds_count" in metrics
    assert 'kip714_exporter_lag_pushes{exporter="debug"}' in metrics
    # The jsonl exporter's own counters, through its stats object.
    assert 'kip714_exporter_stat{exporter="debug",stat=' in metrics

    assert server.stop() == 0
    assert any("kip714 stopped" in e.get("event", "") for e in server.events())


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[kafka]\nlisten = "127.0.0.1:0"\n[telemetry]\nmax_bytes = -5\n')
    result = subprocess.run(
        [sys.executable, "-m", "telemetry", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("kip714: config error: telemetry.max_bytes: invalid value -5")


def test_unknown_exporter_type_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[exporters.x]\ntype = "no-such-exporter"\n')
    result = subprocess.run(
        [sys.executable, "-m", "telemetry", "serve", "--config", str(config),
         "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "no-such-exporter" in result.stderr
    assert "Traceback" not in result.stderr


async def _push_until_killed(
    server: ServeProcess, acknowledged: set[str], clients: int, stop: threading.Event
) -> None:
    async def one(index: int) -> None:
        client = await WireClient.connect(*server.kafka, client_id=f"durable-{index}")
        try:
            await client.api_versions()
            answer = await client.subscribe()
            seq = 0
            while not stop.is_set() and seq < 200:
                name = f"durability.c{index}.s{seq}"
                response = await client.push(
                    answer.client_instance_id, answer.subscription_id, otlp_payload(name)
                )
                if response.error_code == ErrorCode.NONE:
                    acknowledged.add(name)
                seq += 1
                await asyncio.sleep(0.11)  # the 100 ms interval gate
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError):
            return  # the server was killed under us
        finally:
            await client.close()

    await asyncio.gather(*(one(i) for i in range(clients)))


def test_every_acknowledged_push_survives_sigkill(tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = CONFIG.format(out=out).replace('"interval.ms" = 300', '"interval.ms" = 100')
    server = ServeProcess(tmp_path / "data", config).start()
    acknowledged: set[str] = set()
    stop = threading.Event()
    loader = threading.Thread(
        target=lambda: asyncio.run(_push_until_killed(server, acknowledged, 12, stop)), daemon=True
    )
    loader.start()
    assert wait_until(lambda: len(acknowledged) >= 150, 30)
    server.kill()  # SIGKILL while the clients push
    stop.set()
    loader.join(30)
    assert not loader.is_alive()
    assert len(acknowledged) >= 150

    restarted = ServeProcess(tmp_path / "data", config).start()
    try:
        assert wait_until(lambda: acknowledged <= {r["metric_name"] for r in rows(out)}, 30), (
            sorted(acknowledged - {r["metric_name"] for r in rows(out)})[:5]
        )
        assert restarted.stop() == 0
    finally:
        restarted.kill()
    landed_names = [r["metric_name"] for r in rows(out)]
    assert set(landed_names) >= acknowledged
    # Every logged push is delivered; unacknowledged ones may be too (at least once).
    assert all(name.startswith("durability.") for name in landed_names)


async def _subscription(server: ServeProcess, instance: uuid.UUID | None = None) -> Any:
    client = await WireClient.connect(*server.kafka, client_id="reloader")
    try:
        await client.api_versions()
        if instance is None:
            return await client.subscribe()
        return await client.get_subscriptions(instance)
    finally:
        await client.close()


def test_sighup_reloads_subscriptions_for_the_next_request(tmp_path: Path) -> None:
    config = '[subscriptions.first]\nmetrics = ["a."]\n"interval.ms" = 100\n'
    server = ServeProcess(tmp_path / "data", config).start()
    try:
        before = asyncio.run(_subscription(server))
        assert before.requested_metrics == ("a.",)
        assert server.config_path is not None
        server.config_path.write_text(
            '[subscriptions.second]\nmetrics = ["b."]\n"interval.ms" = 200\n'
        )
        assert server.process is not None
        server.process.send_signal(signal.SIGHUP)
        assert wait_until(lambda: any("reloaded" in e.get("event", "") for e in server.events()))
        time.sleep(0.25)  # past the interval gate
        after = asyncio.run(_subscription(server, before.client_instance_id))
        assert after.error_code == ErrorCode.NONE
        assert after.requested_metrics == ("b.",)
        assert after.push_interval_ms == 200
        assert after.subscription_id != before.subscription_id
        # A broken file on SIGHUP keeps the subscriptions in force.
        server.config_path.write_text("[subscriptions.third\n")
        server.process.send_signal(signal.SIGHUP)
        assert wait_until(lambda: any("keeping" in e.get("event", "") for e in server.events()))
        assert server.stop() == 0
    finally:
        server.kill()
