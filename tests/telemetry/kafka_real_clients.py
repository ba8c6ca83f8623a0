"""Real confluent-kafka (librdkafka) clients pushing telemetry to an in-process listener.

librdkafka runs telemetry on its own threads; every blocking call (create,
close, destroy) runs in a worker thread so the event loop keeps serving the
listener meanwhile. The recipe: no sparse
connections, a short push interval, and close ≥100 ms after a push so the
client is in PUSH_SCHEDULED and sends its terminating push.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Literal

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

if TYPE_CHECKING:
    from exporters.api import LoggedPush
    from tests.telemetry.kafka_wire_client import Server

ClientKind = Literal["producer", "consumer", "admin"]

# librdkafka measures the next push from the previous response; closing in this
# window after a push (interval 300 ms) leaves the client waiting for its next one.
CLOSE_WINDOW_MS = (100, 180)


ConfigValue = str | int | float | bool


def client_config(port: int, client_id: str, **extra: ConfigValue) -> dict[str, ConfigValue]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "client.id": client_id,
        "enable.metrics.push": True,
        "enable.sparse.connections": False,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "socket.connection.setup.timeout.ms": 5000,
        **extra,
    }


class RealClient:
    """One confluent-kafka handle; :meth:`close` blocks, call it from a thread."""

    def __init__(self, kind: ClientKind, config: dict[str, ConfigValue]) -> None:
        self.kind = kind
        self.client_id = str(config["client.id"])
        self._handles: list[Any] = []
        if kind == "producer":
            self._handles.append(Producer(config))
        elif kind == "consumer":
            self._handles.append(Consumer(config))
        else:
            self._handles.append(AdminClient(config))

    def close(self) -> None:
        """Close (producer, consumer) or destroy (admin, on dealloc): the terminating push."""
        if not self._handles:
            return
        handle = self._handles.pop()
        if self.kind == "producer":
            handle.flush(1.0)
            handle.close()
        elif self.kind == "consumer":
            handle.close()
        del handle  # the last reference: AdminClient is destroyed here, in this thread


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def pushes_of(pushes: list[LoggedPush], client_id: str) -> list[LoggedPush]:
    return [p for p in pushes if p.client_id == client_id]


async def push_then_close(
    server: Server, client: RealClient, regular_pushes: int, timeout_s: float
) -> list[LoggedPush]:
    """Wait for ``regular_pushes`` pushes, close in the quiet window, wait for the terminating push.

    Every wait is bounded; returns the client's logged pushes (which the
    caller checks: a missing push or terminating push fails there).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        mine = pushes_of(await server.pushes(), client.client_id)
        if mine and len(mine) >= regular_pushes:
            age_ms = wall_clock_ms() - mine[-1].received_time_ms
            if CLOSE_WINDOW_MS[0] <= age_ms <= CLOSE_WINDOW_MS[1]:
                break
        await asyncio.sleep(0.01)
    await asyncio.wait_for(asyncio.to_thread(client.close), timeout_s)
    final = await server.wait_for_pushes(
        lambda pushes: any(p.terminating for p in pushes_of(pushes, client.client_id)),
        timeout_s=3.0,
    )
    return pushes_of(final, client.client_id)
