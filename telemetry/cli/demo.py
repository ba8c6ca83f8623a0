"""``kip714 demo``: the whole product on this machine, in one bounded command.

It starts ``kip714 serve`` on free loopback ports with a short push interval
and the lake's landing table, runs real librdkafka producers and consumers
against it for a while, stops them (their terminating pushes land too), stops
the server, runs the Spark rollups on the lake, and prints the per-client
health view from the ``client_health_1h`` table. The data directory is kept so
a newcomer can look at the lake afterwards (``demo_lake``).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from telemetry.cli import demo_lake
from telemetry.cli.common import HelpFormatter

if TYPE_CHECKING:
    from collections.abc import Sequence

_SERVING = re.compile(r"kafka=(?P<host>[^ ]+):(?P<port>\d+) advertised=\S+ http=(?P<http>\S+)")
_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 60.0

_CONFIG = """\
# Written by kip714 demo.
[subscriptions.demo]
metrics = ["*"]
"interval.ms" = {interval_ms}

[exporters.landing]
type = "iceberg"
[exporters.landing.options]
path = "{data_dir}"
"""

_HEALTH_COLUMNS = (
    ("client_id", "client", 18),
    ("client_type", "type", 9),
    ("request_latency_avg_ms", "req lat avg", 12),
    ("request_latency_max_ms", "req lat max", 12),
    ("queue_time_avg_ms", "queue avg", 10),
    ("throttle_time_max_ms", "throttle max", 13),
    ("connection_creation_rate", "conn tries/s", 12),
)
_CONNECTIONS = re.compile(r"^kip714_kafka_connections(?:_closed_total\{[^}]*\})? (\S+)$", re.M)
_CONNECTION_NOTE = """
  conn tries/s is the client's connection.creation.rate: librdkafka counts every connect
  attempt, and a consumer's GroupCoordinator that has no address (kip714 is no group
  coordinator; FindCoordinator answers COORDINATOR_NOT_AVAILABLE) is attempted about once a
  second without opening a socket. kip714 accepted {connections} Kafka connections in total."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip714 demo",
        description="The whole product on this machine, in one bounded command: kip714 serve on "
        "free loopback ports, real librdkafka producers and consumers pushing to it, the Spark "
        "rollups over the lake, and the per-client health view. The data directory is kept.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--data-dir", metavar="DIR", help="where to keep the data (default: a new temp dir)"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=24.0,
        help="how long the clients run (the report's charts get a point per 2 s)",
    )
    parser.add_argument("--producers", type=int, default=2, help="librdkafka producers to run")
    parser.add_argument("--consumers", type=int, default=2, help="librdkafka consumers to run")
    parser.add_argument(
        "--interval-ms", type=int, default=1000, help="the push interval the subscription asks"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import confluent_kafka  # noqa: F401, PLC0415 - only the demo needs a Kafka client
        import pyspark  # noqa: F401, PLC0415
    except ImportError as error:
        print(
            f"kip714 demo: {error}; install it with: python3 -m pip install -e '.[demo]'",
            file=sys.stderr,
        )
        return 2
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="kip714-demo-")).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"kip714 demo: data in {data_dir}")
    server = _start_server(data_dir, args.interval_ms)
    connections = "an unknown number of"
    try:
        bootstrap, http = _wait_for_listener(server, data_dir / "serve.log")
        print(f"  server listening on {bootstrap} (push interval {args.interval_ms} ms)")
        _run_clients(bootstrap, args.producers, args.consumers, args.seconds)
        connections = _accepted_connections(http)
    finally:
        _stop_server(server)
    points = demo_lake.landed_points(data_dir)
    print(f"  landed {points} data points in {data_dir / 'lake'}")
    if points == 0:
        print("kip714 demo: nothing landed; see serve.log", file=sys.stderr)
        return 1
    print("  running the Spark rollups (local mode) ...")
    from spark_jobs import job  # noqa: PLC0415 - PySpark loads only here

    # A 2 s gauge window too, so the report's charts have a point per 2 s of the short run.
    status = job.main(["--data-dir", str(data_dir), "--windows", "2s,1m,1h"])
    if status != 0:
        return status
    _print_health(data_dir)
    print(_CONNECTION_NOTE.format(connections=connections))
    import report  # noqa: PLC0415 - pyiceberg loads only here

    page = data_dir / "report.html"
    report.write_report(data_dir, page)
    print(f"\nHTML report (open it in a browser): {page}")
    return 0


def _start_server(data_dir: Path, interval_ms: int) -> subprocess.Popen[bytes]:
    config = data_dir / "kip714-demo.toml"
    config.write_text(_CONFIG.format(interval_ms=interval_ms, data_dir=data_dir))
    log = (data_dir / "serve.log").open("wb")
    command = [
        sys.executable, "-m", "telemetry", "serve", "--config", str(config),
        "--data-dir", str(data_dir), "--kafka-listen", "127.0.0.1:0",
        "--http-listen", "127.0.0.1:0", "--log-format", "json",
    ]  # fmt: skip
    try:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=dict(os.environ)
        )
    finally:
        log.close()


def _wait_for_listener(server: subprocess.Popen[bytes], log: Path) -> tuple[str, str]:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        match = _SERVING.search(log.read_text(errors="replace")) if log.exists() else None
        if match:
            return f"{match['host']}:{match['port']}", match["http"]
        if server.poll() is not None:
            raise SystemExit(f"kip714 demo: the server exited; see {log}")
        time.sleep(0.1)
    raise SystemExit(f"kip714 demo: the server did not start within {_START_TIMEOUT_S:.0f} s")


def _run_clients(bootstrap: str, producers: int, consumers: int, seconds: float) -> None:
    from confluent_kafka import Consumer, Producer  # noqa: PLC0415

    common: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap,
        "enable.sparse.connections": False,
        "log_level": 0,
    }
    clients: list[Any] = [
        Producer({**common, "client.id": f"demo-producer-{i}"}) for i in range(producers)
    ]
    clients += [
        Consumer({**common, "client.id": f"demo-consumer-{i}", "group.id": "demo"})
        for i in range(consumers)
    ]
    print(f"  {producers} producers and {consumers} consumers push telemetry for {seconds:.0f} s")
    stop = threading.Event()

    def poll(client: Any) -> None:
        while not stop.is_set():
            client.poll(0.1)

    threads = [threading.Thread(target=poll, args=(c,), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(5)
    for client in clients:
        if isinstance(client, Producer):
            client.flush(2)
        else:
            client.close()  # sends the terminating push
    del clients
    time.sleep(1.0)  # let the last terminating pushes arrive


def _accepted_connections(http: str) -> str:
    """Open plus closed Kafka connections, from the server's own /metrics."""
    try:
        with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return "an unknown number of"
    return f"{sum(float(v) for v in _CONNECTIONS.findall(text)):.0f}"


def _stop_server(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def _print_health(data_dir: Path) -> None:
    rows = demo_lake.health_rows(data_dir)
    if rows is None:
        print("  (no client_health_1h rollup was written)")
        return
    print(f"\nPer-client health, hourly (table kip714.client_health_1h in {data_dir / 'lake'}):")
    print("  " + " ".join(f"{title:>{width}}" for _, title, width in _HEALTH_COLUMNS))
    for row in sorted(rows, key=lambda r: (str(r.get("client_type")), str(r.get("client_id")))):
        cells = []
        for column, _, width in _HEALTH_COLUMNS:
            value = row.get(column)
            text = (
                "-"
                if value is None
                else (f"{value:.2f}" if isinstance(value, float) else str(value))
            )
            cells.append(f"{text[:width]:>{width}}")
        print("  " + " ".join(cells))
