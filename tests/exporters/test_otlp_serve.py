"""kip714 forwarding through the otlp exporter to a second kip714's ``/v1/metrics``, end to end.

A real librdkafka producer pushes to server A; A's ``otlp`` exporter sends
every logged push to server B (several pushes may share one request, which
B logs as one push). A data point is recognised on both sides by its client
instance id, metric name, time, value and attributes, which no two pushes
share; a push arrived as many times as its rarest data point did. While B
is up every push arrives exactly once; when B is down for 10 s A's
readiness shows the exporter failing (with the backend's error) or stalled,
and afterwards every push has arrived
at least once (duplicates are counted, none may be missing).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import TYPE_CHECKING, Any

from confluent_kafka import Producer

from tests.exporters.support import PRODUCERS_INTERVAL_MS, PRODUCERS_INTO_JSONL
from tests.telemetry.serve_process import ServeProcess
from tests.telemetry.server.test_serve import rows, wait_until
from tests.telemetry.server_support import close_between_pushes

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

Point = tuple[str, str, str, Any, str]

SENDER = (
    PRODUCERS_INTO_JSONL
    + """[exporters.forward]
type = "otlp"
retry_max_ms = 500
stall_timeout_s = 2
drain_timeout_s = 1
[exporters.forward.options]
endpoint = "{endpoint}"
batch_timeout_ms = 50
retry_max_ms = 500
timeout_s = 5
"""
)
RECEIVER = """
[exporters.landing]
enabled = false
[exporters.lines]
type = "jsonl"
[exporters.lines.options]
path = "{out}/"
"""


def _point(row: dict[str, Any], instance: str) -> Point:
    attributes = json.dumps(row["attributes"], sort_keys=True)
    return (instance, row["metric_name"], row["time"], row["value"], attributes)


def _sent(out: Path) -> dict[int, set[Point]]:
    """A's logged pushes: offset -> data points."""
    pushes: dict[int, set[Point]] = {}
    for row in rows(out):
        pushes.setdefault(row["push_offset"], set()).add(_point(row, row["client_instance_id"]))
    return pushes


def _arrivals(sent: dict[int, set[Point]], out: Path) -> dict[int, int]:
    """How many times each of A's pushes arrived at B."""
    seen = Counter(
        _point(row, row["resource_attributes"]["kafka.client.instance.id"]) for row in rows(out)
    )
    return {offset: min(seen[p] for p in points) for offset, points in sent.items()}


def _closed(out: Path, client_id: str) -> bool:
    """The client's terminating push is in the log: it pushes nothing more."""
    return any(r["terminating"] and r["client_id"] == client_id for r in rows(out))


def _produce_for(
    bootstrap: str, seconds: float, client_id: str, during: Callable[[], None], landed: Path
) -> None:
    """Run an idle producer (it pushes telemetry) for ``seconds``, then close it between pushes."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "enable.sparse.connections": False,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
        }
    )
    deadline = time.monotonic() + seconds
    during_at = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        producer.poll(0.05)
        if time.monotonic() >= during_at:
            during()  # librdkafka pushes from its own threads meanwhile
            during_at = float("inf")
    producer.flush(2)
    close_between_pushes(producer.close, landed / "kip714.jsonl", client_id, PRODUCERS_INTERVAL_MS)


def _readyz(server: ServeProcess) -> tuple[int, str]:
    url = f"http://{server.http[0]}:{server.http[1]}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_every_push_reaches_the_second_kip714_once_and_at_least_once_across_an_outage(
    tmp_path: Path,
) -> None:
    sent_out, arrived_out = tmp_path / "a-out", tmp_path / "b-out"
    receiver = ServeProcess(tmp_path / "b", RECEIVER.format(out=arrived_out)).start()
    processes = [receiver]
    try:
        listen = f"{receiver.http[0]}:{receiver.http[1]}"
        config = SENDER.format(out=sent_out, endpoint=f"http://{listen}/v1/metrics")
        sender = ServeProcess(tmp_path / "a", config).start()
        processes.append(sender)

        # Up all the time: exactly once.
        _produce_for(sender.bootstrap, 3.0, "steady", lambda: None, sent_out)
        assert wait_until(lambda: _closed(sent_out, "steady"))
        assert len(_sent(sent_out)) >= 5
        # Then B must get as many rows as A: each push arrived, and nothing else did.
        assert wait_until(lambda: len(rows(arrived_out)) == len(rows(sent_out)))
        assert set(_arrivals(_sent(sent_out), arrived_out).values()) == {1}

        # Down for 10 s in the middle of a client's life: at least once, none missing.
        readiness: list[tuple[int, str]] = []

        def outage() -> None:
            assert receiver.stop() == 0
            time.sleep(4.0)
            readiness.append(_readyz(sender))
            time.sleep(6.0)
            restarted = ServeProcess(tmp_path / "b", RECEIVER.format(out=arrived_out), listen)
            processes.append(restarted)
            restarted.start()

        _produce_for(sender.bootstrap, 14.0, "outage", outage, sent_out)
        assert wait_until(lambda: _closed(sent_out, "outage"))
        assert wait_until(lambda: min(_arrivals(_sent(sent_out), arrived_out).values()) >= 1, 60), (
            f"missing {list(_arrivals(_sent(sent_out), arrived_out).values()).count(0)}"
        )
        sent = _sent(sent_out)
        arrivals = _arrivals(sent, arrived_out)
        duplicates = sum(count - 1 for count in arrivals.values())
        print(f"{len(sent)} pushes sent, {duplicates} duplicate(s) after a 10 s outage")
        outage_pushes = {r["push_offset"] for r in rows(sent_out) if r["client_id"] == "outage"}
        assert len(outage_pushes) >= 20
        (status, body), *_ = readiness
        assert status == 503
        assert "exporter forward is" in body and _down(body)
        assert wait_until(lambda: _readyz(sender)[0] == 200, 30)
        assert sender.stop() == 0
    finally:
        for process in processes:
            process.kill()


def _down(readyz_body: str) -> bool:
    """``/readyz`` names the otlp exporter as failing to reach its backend, or as stalled."""
    return "stalled" in readyz_body or ("is failing" in readyz_body and "v1/metrics" in readyz_body)


def test_pushes_logged_while_the_backend_is_down_are_sent_after_a_restart(
    tmp_path: Path,
) -> None:
    sent_out, arrived_out = tmp_path / "a-out", tmp_path / "b-out"
    receiver = ServeProcess(tmp_path / "b", RECEIVER.format(out=arrived_out)).start()
    listen = f"{receiver.http[0]}:{receiver.http[1]}"
    assert receiver.stop() == 0  # its address is known, and nothing answers there
    config = SENDER.format(out=sent_out, endpoint=f"http://{listen}/v1/metrics")
    processes = [ServeProcess(tmp_path / "a", config).start()]
    try:
        _produce_for(processes[0].bootstrap, 2.0, "early", lambda: None, sent_out)
        assert wait_until(lambda: _closed(sent_out, "early"))
        assert wait_until(lambda: _down(_readyz(processes[0])[1]))
        assert processes[0].stop() == 0  # shutdown is bounded although nothing was delivered
        assert not rows(arrived_out)

        processes.append(ServeProcess(tmp_path / "b", RECEIVER.format(out=arrived_out), listen))
        processes[-1].start()
        processes.append(ServeProcess(tmp_path / "a", config).start())
        sent = _sent(sent_out)
        assert len(sent) >= 3
        assert wait_until(lambda: min(_arrivals(sent, arrived_out).values()) >= 1)
    finally:
        for process in processes:
            process.kill()
