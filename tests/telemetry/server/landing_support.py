"""Shared by the ``kip714 serve`` landing tests: wait, push until stopped, read the jsonl twin."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

from telemetry.errors import ErrorCode
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.server_support import exported_rows

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.telemetry.serve_process import ServeProcess

POINTS_PER_PUSH = 3


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def jsonl_rows(out: Path) -> list[dict[str, Any]]:
    return exported_rows(out / "kip714.jsonl")


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
