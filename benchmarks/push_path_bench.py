"""Event-loop CPU per Kafka push, in process: the push path without sockets or a load generator.

``ack_bench`` measures the whole server under a closed loop over real
sockets, and on a shared 2-core machine its figures move with everybody
else's load. This drives the same objects (``KafkaListener``'s connections,
API table, ingress flow, manager, quotas and a durable ``IngestLog``) from
one event loop: each round, every connection gets one librdkafka-shaped
PushTelemetry v0 frame through ``buffer_updated`` and the round ends when
every push is acknowledged (the log's group commit, fsync included). The
listener's clock moves 101 ms per round, so every push passes the 100 ms
interval gate. What it reports is the event loop thread's CPU time
(``time.thread_time``) per push, the harness's own feeding included, and
the process's (the log writer thread's ``writev`` + ``fdatasync`` added).

To compare two commits, run it from an export of each (``git archive``)
with ``PYTHONPATH`` pointing there, alternating.

    python3 benchmarks/push_path_bench.py                 # every client under a quota
    python3 benchmarks/push_path_bench.py --no-quotas --rounds 200
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Final

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import build_payloads

from telemetry.core.manager import TelemetryManager
from telemetry.enforcement import Enforcement
from telemetry.enforcement.settings import parse_quotas
from telemetry.ingest import IngestLog
from telemetry.ingest.config import LogConfig
from telemetry.kafka.connection import KafkaConnection
from telemetry.kafka.listener import KafkaListener
from telemetry.kafka.settings import KafkaListenerConfig
from telemetry.wire import (
    ApiKey,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    RequestHeader,
    decode_response,
    encode_request,
)

#: ack_bench --quotas: every client under quotas it never reaches.
EVERY_CLIENT: Final = {
    "clients": [
        {
            "client_id": "<default>",
            "push_byte_rate": 1e12,
            "request_percentage": 1e9,
            "controller_mutation_rate": 1e9,
        }
    ]
}
ZSTD: Final = 4


class _Transport:
    """What a ``KafkaConnection`` writes to: the responses, and a future per awaited one."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.written: list[bytes] = []
        self.waiter: asyncio.Future[None] | None = None

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", self.port) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.written.append(data)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _request(api_key: ApiKey, request: object) -> bytes:
    header = RequestHeader(api_key=api_key, api_version=0, correlation_id=1, client_id="rdkafka")
    return encode_request(header, request)  # type: ignore[arg-type]


async def measure(connections: int, rounds: int, quotas: bool) -> tuple[float, float, int]:
    """(loop µs, process µs) per push over ``rounds``, and pushes answered with an error."""
    directory = tempfile.mkdtemp(prefix="kip714-push-path-")
    try:
        return await _measure(directory, connections, rounds, quotas)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _measure(
    directory: str, connections: int, rounds: int, quotas: bool
) -> tuple[float, float, int]:
    clock_ms = [time.time_ns() // 1_000_000]
    log = await IngestLog.open(directory, LogConfig())
    manager = TelemetryManager()
    manager.update_subscription("bench", {"metrics": ["*"], "interval.ms": 100})
    listener = KafkaListener(
        KafkaListenerConfig(port=0),
        manager,
        log,
        clock=lambda: clock_ms[0],
        enforcement=Enforcement(parse_quotas(EVERY_CLIENT if quotas else {})),
    )
    payloads = build_payloads()
    peers: list[tuple[KafkaConnection, _Transport, bytes]] = []

    def feed(connection: KafkaConnection, frame: bytes) -> None:
        listener.read_buffer[: len(frame)] = frame
        connection.buffer_updated(len(frame))

    for index in range(connections):
        connection = KafkaConnection(listener, listener._new_state)
        transport = _Transport(10_000 + index)
        connection.connection_made(transport)  # type: ignore[arg-type]
        zero = GetTelemetrySubscriptionsRequest(client_instance_id=uuid.UUID(int=0))
        feed(connection, _request(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, zero))
        _, got = decode_response(transport.written.pop()[4:], ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0)
        assert isinstance(got, GetTelemetrySubscriptionsResponse)
        push = PushTelemetryRequest(
            client_instance_id=got.client_instance_id,
            subscription_id=got.subscription_id,
            terminating=False,
            compression_type=ZSTD,
            metrics=payloads[index % len(payloads)],
        )
        peers.append((connection, transport, _request(ApiKey.PUSH_TELEMETRY, push)))
    loop = asyncio.get_running_loop()

    async def one_round() -> None:
        clock_ms[0] += 101
        waiters = []
        for connection, transport, frame in peers:
            transport.waiter = loop.create_future()
            waiters.append(transport.waiter)
            feed(connection, frame)
        await asyncio.gather(*waiters)

    for _ in range(10):
        await one_round()
    gc.freeze()  # as `kip714 serve` does after start-up
    gc.set_threshold(20_000, 20, 50)
    thread, process = time.thread_time(), time.process_time()
    for _ in range(rounds):
        await one_round()
    thread, process = time.thread_time() - thread, time.process_time() - process
    # A push response v0 ends with its error code (int16) and no tagged fields.
    errors = sum(1 for _, transport, _ in peers if transport.written[-1][-3:-1] != b"\x00\x00")
    await log.close()
    pushes = rounds * connections
    return thread / pushes * 1e6, process / pushes * 1e6, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--no-quotas", action="store_true")
    args = parser.parse_args(argv)
    if not (1 <= args.connections <= 2_000 and 1 <= args.rounds <= 1_000):
        parser.error("bounded: --connections 1-2000, --rounds 1-1000")
    loop_us, process_us, errors = uvloop.run(
        measure(args.connections, args.rounds, not args.no_quotas)
    )
    print(
        f"push path, quotas {'off' if args.no_quotas else 'on'}: {loop_us:.1f} µs event loop CPU"
        f" per push, {process_us:.1f} µs process CPU ({args.rounds} x {args.connections} pushes,"
        f" {errors} errors); load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
