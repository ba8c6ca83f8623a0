"""SIGHUP changes the quotas of a running ``kip714 serve``, on both listeners, keeping usage."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from telemetry.errors import ErrorCode
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

SUBSCRIPTION = '[subscriptions.all]\nmetrics = ["*"]\n"interval.ms" = 100\n'
PAYLOAD = otlp_payload("org.apache.kafka.producer.sighup", points=40)


def quota_config(push_byte_rate: float, window_num: int = 11) -> str:
    return (
        SUBSCRIPTION
        + f"[quotas]\nwindow_num = {window_num}\n"
        + f'[[quotas.clients]]\nclient_id = "reloaded"\npush_byte_rate = {push_byte_rate}\n'
    )


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


async def push_once(client: WireClient, pushes: int) -> list[tuple[ErrorCode, int]]:
    subscription = await client.subscribe()
    answers = []
    for _ in range(pushes):
        await asyncio.sleep(0.12)  # past the 100 ms push interval
        answer = await client.push(
            subscription.client_instance_id, subscription.subscription_id, PAYLOAD
        )
        answers.append((ErrorCode(answer.error_code), answer.throttle_time_ms))
    return answers


async def session(server: ServeProcess, pushes: int) -> list[tuple[ErrorCode, int]]:
    client = await WireClient.connect(*server.kafka, "reloaded")
    try:
        return await push_once(client, pushes)
    finally:
        await client.close()


def test_sighup_lowers_a_quota_and_the_usage_so_far_still_counts(tmp_path: Path) -> None:
    # Generous at first: three pushes of P bytes are far within it.
    server = ServeProcess(tmp_path / "data", quota_config(len(PAYLOAD) * 100)).start()
    try:
        before = asyncio.run(session(server, 3))
        assert server.config_path is not None and server.process is not None
        # Now 3P over the 10 s window is 3x the quota, while one more push
        # alone (P over 10 s) would be within it: only kept usage throttles.
        server.config_path.write_text(quota_config(len(PAYLOAD) / 10))
        server.process.send_signal(signal.SIGHUP)
        assert wait_until(
            lambda: any("quotas and limits reloaded" in line for line in server.lines)
        )
        after = asyncio.run(session(server, 1))
        metrics = scrape(server)
        assert server.stop() == 0
    finally:
        server.kill()
    assert before == [(ErrorCode.NONE, 0)] * 3
    [(code, throttle_ms)] = after
    assert code == ErrorCode.NONE
    # 4P over ~10 s against P/10 per second: about 3 windows of 10 s over.
    assert throttle_ms > 10_000
    # The sensors behind it, under Kafka's names mapped to Prometheus's.
    assert 'kip714_quota_push_byte_rate{client_id="reloaded",user=""}' in metrics
    assert 'kip714_throttles_total{reason="push_byte_rate"} 1.0' in metrics
    assert 'kip714_quota_throttle_time_ms{client_id="reloaded",quota_type="Produce",user=""}' in (
        metrics
    )


def scrape(server: ServeProcess) -> str:
    host, port = server.http
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_sighup_with_a_new_window_changes_nothing(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "data", quota_config(1.0)).start()
    try:
        assert server.config_path is not None and server.process is not None
        server.config_path.write_text(quota_config(1e12, window_num=5))
        server.process.send_signal(signal.SIGHUP)
        assert wait_until(lambda: any("keeping the current" in line for line in server.lines))
        [(code, throttle_ms)] = asyncio.run(session(server, 1))
        assert server.stop() == 0
    finally:
        server.kill()
    assert code == ErrorCode.NONE
    assert throttle_ms > 0  # still the 1 B/s quota: the reload was refused whole


def http_post(server: ServeProcess, path: str, body: bytes, headers: dict[str, str]) -> Any:
    """``(status, JSON body)``; an HTTP error status is an answer, not an exception."""
    host, port = server.http
    request = urllib.request.Request(
        f"http://{host}:{port}{path}", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def test_sighup_changes_the_quotas_of_the_http_routes_too(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "data", quota_config(1e12)).start()
    try:
        status, sub = http_post(
            server,
            "/v1/telemetry/subscriptions",
            json.dumps({"client_id": "reloaded"}).encode(),
            {"Content-Type": "application/json"},
        )
        assert status == 200
        headers = {
            "Kip714-Client-Instance-Id": sub["client_instance_id"],
            "Kip714-Subscription-Id": str(sub["subscription_id"]),
            "Kip714-Client-Id": "reloaded",
        }
        before = http_post(server, "/v1/telemetry/push", PAYLOAD, headers)
        assert server.config_path is not None and server.process is not None
        server.config_path.write_text(quota_config(len(PAYLOAD) / 100))
        server.process.send_signal(signal.SIGHUP)
        assert wait_until(
            lambda: any("quotas and limits reloaded" in line for line in server.lines)
        )
        time.sleep(0.12)  # past the 100 ms push interval
        throttled = http_post(server, "/v1/telemetry/push", PAYLOAD, headers)
        muted = http_post(server, "/v1/telemetry/push", PAYLOAD, headers)
        assert server.stop() == 0
    finally:
        server.kill()
    assert before == (200, {"throttle_time_ms": 0, "error_code": 0, "error_name": "NONE"})
    # The lowered quota, over the usage kept from before the reload: accepted, throttled.
    status, answer = throttled
    assert (status, answer["error_code"]) == (200, ErrorCode.NONE)
    assert answer["throttle_time_ms"] > 10_000
    status, answer = muted
    assert (status, answer["error_code"]) == (429, ErrorCode.THROTTLING_QUOTA_EXCEEDED)
    assert 0 < answer["throttle_time_ms"] <= throttled[1]["throttle_time_ms"]
