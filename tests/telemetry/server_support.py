"""An in-process ``Server`` on free loopback ports, and helpers to push to it and ask it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from telemetry.errors import ErrorCode
from telemetry.server.bootstrap import Server
from telemetry.server.config import load_settings
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

#: The push interval the test subscriptions ask for; pushes are spaced a little more.
INTERVAL_MS = 100


@contextlib.asynccontextmanager
async def running(tmp_path: Path, config: str) -> AsyncIterator[Server]:
    """``Server`` on ``tmp_path / "data"`` with ``config``; stopped on the way out."""
    path = tmp_path / "kip714.toml"
    path.write_text(config)
    settings = load_settings(
        path,
        data_dir=tmp_path / "data",
        kafka_listen="127.0.0.1:0",
        http_listen="127.0.0.1:0",
    )
    server = Server(settings)
    try:
        await server.start()
        yield server
    finally:
        await asyncio.wait_for(server.stop(), 120)


async def get(server: Server, path: str) -> tuple[int, Any]:
    assert server.http_address is not None
    host, port = server.http_address
    async with aiohttp.ClientSession() as session, session.get(f"http://{host}:{port}{path}") as r:
        if r.content_type == "application/json":
            return r.status, await r.json()
        return r.status, await r.text()


async def until(condition: Callable[[], Any], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await condition():
            await asyncio.sleep(0.05)


async def ready_is(server: Server, status: int, timeout_s: float = 30.0) -> dict[str, Any]:
    """Wait until ``/readyz`` answers ``status``; return its body."""
    body: dict[str, Any] = {}

    async def answered() -> bool:
        nonlocal body
        code, body = await get(server, "/readyz")
        return bool(code == status)

    await until(answered, timeout_s)
    return body


async def push_names(
    server: Server,
    names: list[str],
    *,
    points: int = 3,
    stop_on_refusal: bool = False,
) -> list[str]:
    """Push one payload per name from one client instance; return the acknowledged names."""
    assert server.listener is not None
    client = await WireClient.connect(*server.listener.bound_address, client_id="probe")
    acknowledged: list[str] = []
    try:
        answer = await client.subscribe()
        for name in names:
            await asyncio.sleep(INTERVAL_MS * 1.1 / 1000)  # the interval gate
            response = await client.push(
                answer.client_instance_id,
                answer.subscription_id,
                otlp_payload(name, points=points),
            )
            if response.error_code == ErrorCode.NONE:
                acknowledged.append(name)
            elif stop_on_refusal:
                break
    finally:
        await client.close()
    return acknowledged


def exported_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL exporter's file that a running server has written whole.

    The exporter appends through a buffered file, so a reader polling it can
    catch a line half written: only newline-terminated lines are rows yet.
    """
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    whole = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def close_between_pushes(
    close: Callable[[], object],
    landed: Path,
    client_id: str,
    interval_ms: int,
    timeout_s: float = 10.0,
) -> None:
    """Close a librdkafka client while it waits for its next push, so it sends a terminating push.

    librdkafka sends the terminating push only from PUSH_SCHEDULED, never
    while a regular push is in flight (``librdkafka-client-behaviour.md``
    §4.4), and schedules the next push ``interval_ms`` after the last
    response. A close at a moment left to chance loses that push now and
    then, so this closes in the middle third of an interval after a push the
    JSONL landing ``landed`` shows. After ``timeout_s`` it closes anyway: the
    caller's check for the terminating push then fails, with the reason.
    """
    low, high = interval_ms // 3, 2 * interval_ms // 3
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        received = [
            dt.datetime.fromisoformat(row["received_time"])
            for row in exported_rows(landed)
            if row["client_id"] == client_id
        ]
        if received:
            age_ms = (dt.datetime.now(dt.UTC) - max(received)).total_seconds() * 1000
            if low <= age_ms <= high:
                break
        time.sleep(0.01)
    close()
