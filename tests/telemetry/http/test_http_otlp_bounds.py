"""The OTLP door's bounds (issue 35, items 1, 2 and 7), against ``Server`` over real sockets.

Each hostile body is refused with 400 naming its ``[telemetry]`` key before
any resource is grouped (the identity cache stays untouched), the identity
cache keeps its byte bound, and senders take turns on the decoding threads;
meanwhile a client from another loopback address (127.0.0.2) is answered on
both listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import TYPE_CHECKING

import aiohttp
import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from telemetry.enforcement import ClientQuotaSettings, Enforcement, QuotaSettings
from telemetry.wire import SIZE_PREFIX, ApiKey, ApiVersionsRequest, encode_request
from telemetry.wire.headers import RequestHeader
from tests.telemetry.http.test_http_otlp import (
    JSON,
    PROTOBUF,
    SDK_BODY,
    SDK_RESOURCE,
    length_delimited,
    otlp_request,
    resource_metrics,
    sdk_resource,
)
from tests.telemetry.http_support import running_http
from tests.telemetry.kafka_wire_client import ManualClock, running_server, zstd_stream
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

ROUTE = "/v1/metrics"
OTHER_ADDRESS = "127.0.0.2"  # another source address on loopback (Linux routes 127/8 to lo)
TIMEOUT = aiohttp.ClientTimeout(total=120)
EMPTY_RESOURCE = length_delimited(1, b"")
CONFIG = '[subscriptions.all]\nmetrics = ["*"]\n[exporters.none]\ntype = "jsonl"\n'


def resource_of(**attributes: str) -> bytes:
    """One ``ResourceMetrics`` holding just a resource with ``attributes``."""
    return otlp_request(resource_metrics(attributes, "m", 1))


def _bound_bodies() -> dict[str, tuple[bytes, dict[str, str], str]]:
    sdk = otlp_request(resource_metrics(SDK_RESOURCE, "app.requests"))
    many = b"".join(
        resource_of(**{"service.name": f"svc-{n}", "service.instance.id": "1"}) for n in range(1001)
    )
    assert len(many) > 64 * 1024  # read and grouped on a decoding thread
    json_many = json.dumps({"resourceMetrics": [{}] * 1001}).encode()
    json_scopes = json.dumps({"resourceMetrics": [{"scopeMetrics": [{}] * 1001}]}).encode()
    scopes = length_delimited(
        1, length_delimited(1, sdk_resource()) + length_delimited(2, b"") * 1001
    )
    wide = resource_of(**{f"attribute.{n}": "v" * 14_000 for n in range(5)})  # 70 KB resource
    long_value = resource_of(**{"service.name": "long", "note": "v" * (16 * 1024 + 1)})
    return {
        "resources": (sdk + EMPTY_RESOURCE * 1000, PROTOBUF, "max_resources_per_request"),
        "resources-on-thread": (many, PROTOBUF, "max_resources_per_request"),
        "resources-json": (json_many, JSON, "max_resources_per_request"),
        "scopes": (scopes, PROTOBUF, "max_scopes_per_resource"),
        "scopes-json": (json_scopes, JSON, "max_scopes_per_resource"),
        "resource-bytes": (wide, PROTOBUF, "max_resource_bytes"),
        "attribute-value": (long_value, PROTOBUF, "max_attribute_value_bytes"),
    }


BOUND_BODIES = _bound_bodies()


async def _post(
    server: Server, body: bytes, headers: dict[str, str], local: str = "127.0.0.1"
) -> tuple[int, bytes]:
    assert server.http_address is not None
    host, port = server.http_address
    connector = aiohttp.TCPConnector(local_addr=(local, 0))
    async with (
        aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session,
        session.post(f"http://{host}:{port}{ROUTE}", data=body, headers=headers) as response,
    ):
        return response.status, await response.read()


async def _metrics(server: Server) -> dict[str, float]:
    """``/metrics`` as {series: value} (the series with its labels, as rendered)."""
    assert server.http_address is not None
    host, port = server.http_address
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.get(f"http://{host}:{port}/metrics") as response,
    ):
        text = await response.text()
    return {
        match[1]: float(match[2])
        for match in re.finditer(r"^(kip714_[^ ]+) ([-+0-9.e]+)$", text, re.M)
    }


def _refused(metrics: dict[str, float], reason: str) -> float:
    return metrics.get(f'kip714_requests_refused_total{{door="otlp",reason="{reason}"}}', 0.0)


async def _api_versions_from(server: Server, local: str) -> int:
    """One ApiVersions round trip on a new Kafka connection from ``local``; its error code."""
    assert server.listener is not None
    host, port = server.listener.bound_address
    reader, writer = await asyncio.open_connection(host, port, local_addr=(local, 0))
    try:
        header = RequestHeader(
            api_key=ApiKey.API_VERSIONS, api_version=3, correlation_id=1, client_id="live"
        )
        request = ApiVersionsRequest(client_software_name="live", client_software_version="1")
        writer.write(encode_request(header, request))
        (size,) = SIZE_PREFIX.unpack(await asyncio.wait_for(reader.readexactly(4), 60))
        answer = await asyncio.wait_for(reader.readexactly(size), 60)
        return int.from_bytes(answer[4:6], "big")  # correlation id, then the error code
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _live_client(server: Server, stop: asyncio.Event) -> list[tuple[int, int]]:
    """From 127.0.0.2, until ``stop``: an SDK export and an ApiVersions, each answered."""
    answered: list[tuple[int, int]] = []
    for _ in range(1000):  # bounded; each round is a round trip on each listener
        status, _ = await _post(server, SDK_BODY, PROTOBUF, OTHER_ADDRESS)
        answered.append((status, await _api_versions_from(server, OTHER_ADDRESS)))
        if stop.is_set():
            break
        await asyncio.sleep(0.02)
    return answered


@pytest.mark.parametrize("case", sorted(BOUND_BODIES))
async def test_a_body_over_a_bound_is_400_naming_it_and_nothing_is_grouped(
    tmp_path: Path, case: str
) -> None:
    body, headers, key = BOUND_BODIES[case]
    async with running(tmp_path, CONFIG) as server:
        status, answer = await _post(server, body, headers)
        after_refusal = await _metrics(server)
        good, _ = await _post(server, SDK_BODY, PROTOBUF)
        after_good = await _metrics(server)
    assert status == 400
    refusal = json_format.Parse(answer, Status()) if headers is JSON else Status.FromString(answer)
    assert refusal.code == 3  # INVALID_ARGUMENT
    assert f"telemetry.{key}" in refusal.message
    # Refused before any resource was grouped: no identity was derived or cached.
    assert after_refusal["kip714_http_identity_cache_entries"] == 0
    assert after_refusal["kip714_http_identity_cache_bytes"] == 0
    assert _refused(after_refusal, key) == 1
    assert good == 200  # the door still serves
    assert after_good["kip714_http_identity_cache_entries"] == 1
    assert after_good["kip714_log_appends_total"] == 1


async def test_compressed_floods_of_empty_resources_are_refused_while_others_are_served(
    tmp_path: Path,
) -> None:
    """The issue's 1.4 KB zstd body, scaled down: 200,000 empty ResourceMetrics (400 KB)."""
    bomb = zstd_stream(EMPTY_RESOURCE * 200_000)
    assert len(bomb) < 2048
    headers = {**PROTOBUF, "Content-Encoding": "zstd"}
    async with running(tmp_path, CONFIG) as server:
        stop = asyncio.Event()
        live = asyncio.ensure_future(_live_client(server, stop))
        try:
            answers: list[tuple[int, bytes]] = []
            for _ in range(5):
                answers += await asyncio.gather(*(_post(server, bomb, headers) for _ in range(8)))
        finally:
            stop.set()
        answered = await asyncio.wait_for(live, 120)
        metrics = await _metrics(server)
    assert {status for status, _ in answers} == {400}
    assert all(b"telemetry.max_resources_per_request" in body for _, body in answers)
    assert _refused(metrics, "max_resources_per_request") == 40
    assert answered and set(answered) == {(200, 0)}
    assert metrics["kip714_http_identity_cache_entries"] == 1  # the live client's only


async def test_the_identity_cache_stays_within_its_byte_bound(tmp_path: Path) -> None:
    """200 distinct resources of 15 KiB names, 1 MiB of cache: at most 1 MiB is held."""
    config = CONFIG + "[telemetry]\nidentity_cache_max_bytes = 1048576\n"
    bodies = [
        resource_of(**{"service.name": f"{n:04d}" + "n" * 15_000, "service.instance.id": "1"})
        for n in range(200)
    ]
    async with running(tmp_path, config) as server:
        stop = asyncio.Event()
        live = asyncio.ensure_future(_live_client(server, stop))
        held: list[float] = []
        try:
            for start in range(0, len(bodies), 20):
                statuses = await asyncio.gather(
                    *(_post(server, body, PROTOBUF) for body in bodies[start : start + 20])
                )
                assert {status for status, _ in statuses} == {200}
                held.append((await _metrics(server))["kip714_http_identity_cache_bytes"])
        finally:
            stop.set()
        answered = await asyncio.wait_for(live, 120)
        metrics = await _metrics(server)
    assert max(held) <= 1024 * 1024
    assert held[-1] > 512 * 1024  # full, not emptied
    assert metrics["kip714_http_identity_cache_entries"] < 100  # the rest were evicted
    assert answered and set(answered) == {(200, 0)}


def _big_json(service: str, resources: int) -> bytes:
    request = ExportMetricsServiceRequest(
        resource_metrics=[
            resource_metrics({"service.name": service}, f"m{i}", 40) for i in range(resources)
        ]
    )
    return json.dumps(json_format.MessageToDict(request)).encode()


def _small_json(service: str) -> bytes:
    request = ExportMetricsServiceRequest(
        resource_metrics=[resource_metrics({**SDK_RESOURCE, "service.name": service}, "m", 3)]
    )
    return json.dumps(json_format.MessageToDict(request)).encode()


async def test_a_sender_is_served_while_another_keeps_the_decoding_threads_busy(
    tmp_path: Path,
) -> None:
    """Sender A queues 6 big JSON bodies; sender B's small one waits for A's running ones only.

    First come, first served (one thread) answered B after all 6. Now big
    bodies use one of the two threads, so B's small one finds the other.
    """
    big = _big_json("a", 150)
    assert 64 * 1024 < len(big) < 1024 * 1024
    order: list[str] = []
    async with running_server(tmp_path) as kafka, running_http(kafka) as http:
        decoder = http.ingest.stats.decoder
        assert decoder is not None

        async def send(name: str, body: bytes, local: str) -> None:
            connector = aiohttp.TCPConnector(local_addr=(local, 0))
            async with (
                aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session,
                session.post(http.url + ROUTE, data=body, headers=JSON) as response,
            ):
                assert response.status == 200, await response.text()
            order.append(name)

        senders = [asyncio.ensure_future(send(f"a{n}", big, "127.0.0.1")) for n in range(6)]
        for _ in range(3000):  # until the bodies not running are queued (at most 30 s)
            if decoder.queued() >= 4 or len(order) == 6:
                break
            await asyncio.sleep(0.01)
        queued_before_b = decoder.queued()
        await send("b", _small_json("b"), OTHER_ADDRESS)
        await asyncio.wait_for(asyncio.gather(*senders), 300)
        logged = await kafka.pushes()
    assert queued_before_b >= 4
    # B was answered before the bodies of A queued ahead of it (the running one may end first).
    assert order.index("b") <= 1, order
    assert len(logged) == 7


def _request_nanos(enforcer: Enforcement, client_id: str, now_ms: int) -> float:
    sensor = enforcer.metrics.get_sensor(f"Request-:{client_id}")
    assert sensor is not None
    return float(sensor.metrics[0].measurable_value(now_ms))


async def test_decoding_thread_time_is_charged_to_the_sender(tmp_path: Path) -> None:
    """A big JSON body's parse on a thread counts in its sender's request time, as loop time does.

    Two senders, one quota sensor each (a quota no request reaches); the big
    body costs its thread hundreds of ms, the small one well under one, while
    the event loop spends about the same on either.
    """
    clock = ManualClock()
    enforcer = Enforcement(
        QuotaSettings(clients=(ClientQuotaSettings(client_id="<default>", request_percentage=1e9),))
    )
    async with (
        running_server(tmp_path, clock=clock, enforcement=enforcer) as kafka,
        running_http(kafka) as http,
    ):
        for body in (_big_json("big", 250), _small_json("small")):
            async with http.session.post(http.url + ROUTE, data=body, headers=JSON) as response:
                assert response.status == 200
        big = _request_nanos(enforcer, "big", clock.now_ms)
        small = _request_nanos(enforcer, "small", clock.now_ms)
    assert big > 20 * small > 0
