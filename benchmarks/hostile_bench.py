"""What hostile traffic costs other clients of ``kip714 serve``, each beside an idle baseline.

One run, one ``kip714 serve`` subprocess (``[security]`` with PLAIN users,
an admin token), three measurements, each first idle then under attack:

1. **admin change during a PLAIN flood**: the time of an HTTP admin change
   (``POST /admin/subscriptions/...``, fsynced) while 250 connections send
   wrong PLAIN passwords (goal < 1 s);
2. **Kafka RTT while OTLP bombs decode**: ApiVersions round trips on one Kafka
   connection while gzip OTLP/JSON bodies that expand to 14 MiB (under the
   default 16 MiB bound) are posted (goal: median < 20 ms);
3. **refusing a 300,000-resource DescribeConfigs**: from the last byte sent to
   the connection's close, beside a one-resource DescribeConfigs answered
   (goal < 100 ms);
4. **OTLP floods of empty resources** (issue 35, item 1): Kafka RTT p99 and
   the server's RSS growth while 1.4 KB zstd bodies of 8 million empty
   ``ResourceMetrics`` are posted (refused at the 1,001st);
5. **distinct big OTLP resources** (item 2): the same while anonymous
   requests each bring a new 60 KB resource (the identity cache keeps a
   digest per resource, within its byte bound);
6. **a small OTLP/JSON export behind big ones** (item 7): its latency from
   another address, idle and while two senders keep the decoding threads
   busy with 1 MB JSON bodies, with Kafka RTT p99 and RSS growth.

Targets for 4–6: Kafka RTT p99 < 100 ms, RSS growth < 64 MiB.

    python3 benchmarks/hostile_bench.py          # about a minute
    python3 benchmarks/hostile_bench.py --quick  # fewer attackers and bombs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import aiohttp
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests' helpers

from telemetry.security.settings import hash_password
from telemetry.wire import SIZE_PREFIX, ApiKey, ApiVersionsRequest, encode_request
from telemetry.wire.admin_apis import AdminApiKey, encode_admin_request
from telemetry.wire.config_messages import DescribeConfigsRequest, DescribeConfigsResource
from telemetry.wire.headers import RequestHeader
from telemetry.wire.sasl_messages import SaslAuthenticateRequest, SaslHandshakeRequest
from tests.telemetry.http.test_http_memory import json_bomb
from tests.telemetry.http.test_http_otlp import length_delimited
from tests.telemetry.kafka_wire_client import zstd_stream

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

HOST: Final = "127.0.0.1"
TOKEN: Final = "bench-token"
_SERVING: Final = re.compile(r"kafka=[^ ]+:(\d+) advertised=\S+ http=[^ ]+:(\d+)")


def _config() -> str:
    # The server's default PBKDF2 cost: what a real deployment pays per PLAIN attempt.
    secret = hash_password("right").encoded()
    return (
        '[subscriptions.bench]\nmetrics = ["*"]\n'
        f'[admin]\ntoken = "{TOKEN}"\n'
        "[security]\nallow_anonymous = true\n"
        f'[security.plain_users]\nbench = "{secret}"\n'
    )


class Server:
    def __init__(self, workdir: Path) -> None:
        config = workdir / "kip714.toml"
        config.write_text(_config())
        self.command = [
            sys.executable, "-m", "telemetry", "serve", "--config", str(config),
            "--data-dir", str(workdir / "data"), "--kafka-listen", f"{HOST}:0",
            "--http-listen", f"{HOST}:0",
        ]  # fmt: skip
        self.proc: subprocess.Popen[str] | None = None
        self.kafka = self.http = 0
        self.lines: list[str] = []

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stderr is not None
        stderr = self.proc.stderr
        threading.Thread(target=lambda: self.lines.extend(stderr), daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            match = next(filter(None, map(_SERVING.search, list(self.lines))), None)
            if match:
                self.kafka, self.http = int(match[1]), int(match[2])
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("kip714 serve did not start:\n" + "".join(self.lines[-20:]))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _header(api_key: int, version: int, correlation_id: int = 1) -> RequestHeader:
    return RequestHeader(
        api_key=api_key, api_version=version, correlation_id=correlation_id, client_id="bench"
    )


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = SIZE_PREFIX.unpack(await asyncio.wait_for(reader.readexactly(4), 60))
    return await asyncio.wait_for(reader.readexactly(size), 60)


async def _admin_change_ms(server: Server, interval: int) -> float:
    url = f"http://{HOST}:{server.http}/admin/subscriptions/bench"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    body = json.dumps({"set": {"interval.ms": interval}})
    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
            assert response.status == 200, response.status
        return (time.perf_counter() - started) * 1000


async def _wrong_password(server: Server) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError, TimeoutError):
        reader, writer = await asyncio.open_connection(HOST, server.kafka)
        try:
            handshake = SaslHandshakeRequest(mechanism="PLAIN")
            writer.write(encode_admin_request(_header(AdminApiKey.SASL_HANDSHAKE, 1), handshake))
            await _read_frame(reader)
            token = SaslAuthenticateRequest(auth_bytes=b"\0bench\0wrong")
            writer.write(encode_admin_request(_header(AdminApiKey.SASL_AUTHENTICATE, 1), token))
            await _read_frame(reader)
        finally:
            writer.close()


async def plain_flood(server: Server, attackers: int) -> tuple[float, float]:
    idle = statistics.median([await _admin_change_ms(server, 1000 + i) for i in range(5)])
    flood = [asyncio.ensure_future(_wrong_password(server)) for _ in range(attackers)]
    await asyncio.sleep(0.2)  # the flood is queued and hashing
    attacked = await _admin_change_ms(server, 2000)
    await asyncio.gather(*flood)
    return idle, attacked


async def _rtts(server: Server, stop: asyncio.Event, count: int) -> list[float]:
    reader, writer = await asyncio.open_connection(HOST, server.kafka)
    request = ApiVersionsRequest(client_software_name="bench", client_software_version="1")
    rtts = []
    try:
        for i in range(count):
            if stop.is_set():
                break
            started = time.perf_counter()
            writer.write(encode_request(_header(ApiKey.API_VERSIONS, 3, i), request))
            await _read_frame(reader)
            rtts.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.005)
    finally:
        writer.close()
    return rtts


def _bomb(decoded_bytes: int) -> bytes:
    return json_bomb(decoded_bytes // 16)  # '{"asInt": "1"}, ' per point


async def rtt_under_bombs(server: Server, bombs: int) -> tuple[float, float, int]:
    stop = asyncio.Event()
    idle = statistics.median(await _rtts(server, stop, 200))
    body = _bomb(14 * 1024 * 1024)  # under the default max_decompressed_bytes (16 MiB)
    url = f"http://{HOST}:{server.http}/v1/metrics"
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}

    async def post(session: aiohttp.ClientSession) -> int:
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
            return response.status

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        measuring = asyncio.ensure_future(_rtts(server, stop, 100_000))
        statuses = await asyncio.gather(*(post(session) for _ in range(bombs)))
        stop.set()
        attacked = await measuring
    return idle, statistics.median(attacked), statuses.count(200)


async def _describe_configs_ms(server: Server, resources: int) -> float:
    request = DescribeConfigsRequest(
        resources=tuple(
            DescribeConfigsResource(resource_type=16, resource_name=f"s{i}")
            for i in range(resources)
        )
    )
    frame = encode_admin_request(_header(AdminApiKey.DESCRIBE_CONFIGS, 4), request)
    reader, writer = await asyncio.open_connection(HOST, server.kafka)
    try:
        writer.write(frame)
        await writer.drain()
        started = time.perf_counter()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await _read_frame(reader)  # answered, or the connection closes
        return (time.perf_counter() - started) * 1000
    finally:
        writer.close()


async def describe_configs(server: Server) -> tuple[float, float]:
    idle = statistics.median([await _describe_configs_ms(server, 1) for _ in range(5)])
    return idle, await _describe_configs_ms(server, 300_000)


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        match = re.search(r"^VmRSS:\s+(\d+) kB", status.read(), re.M)
    assert match is not None
    return int(match.group(1)) / 1024


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _under_attack(
    server: Server, attack: Callable[[], Awaitable[object]]
) -> tuple[float, float, float]:
    """Kafka RTT p99 idle, then during ``attack()``, and the RSS growth (MiB) it caused."""
    assert server.proc is not None
    pid = server.proc.pid
    idle = _p99(await _rtts(server, asyncio.Event(), 200))
    before = _rss_mib(pid)
    peak = before
    stop = asyncio.Event()

    async def sample_rss() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _rss_mib(pid))
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample_rss())
    measuring = asyncio.ensure_future(_rtts(server, stop, 100_000))
    try:
        await attack()
    finally:
        stop.set()
    attacked = await measuring
    await sampler
    return idle, _p99(attacked), peak - before


def _otlp_post(
    server: Server, body: bytes, headers: dict[str, str], local: str = HOST
) -> Awaitable[int]:
    async def post() -> int:
        connector = aiohttp.TCPConnector(local_addr=(local, 0))
        timeout = aiohttp.ClientTimeout(total=600)
        url = f"http://{HOST}:{server.http}/v1/metrics"
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.post(url, data=body, headers=headers) as response,
        ):
            await response.read()
            return response.status

    return post()


async def empty_resource_floods(server: Server, bodies: int) -> tuple[float, float, float, int]:
    """Item 1: zstd bodies of 8 million empty ResourceMetrics (16 MB decoded, ~1.4 KB sent)."""
    bomb = zstd_stream(length_delimited(1, b"") * 8_000_000)
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"}
    statuses: list[int] = []

    async def attack() -> None:
        for _ in range(bodies // 4):
            statuses.extend(
                await asyncio.gather(*(_otlp_post(server, bomb, headers) for _ in range(4)))
            )

    idle, attacked, grown = await _under_attack(server, attack)
    return idle, attacked, grown, statuses.count(400)


def _big_resource(index: int) -> bytes:
    """A ResourceMetrics of one new 60 KB resource: four 15 KB attributes, under every bound."""
    attributes = [KeyValue(key="service.name", value=AnyValue(string_value=f"svc-{index}"))] + [
        KeyValue(key=f"note.{n}", value=AnyValue(string_value=f"{index}" + "x" * 15_000))
        for n in range(4)
    ]
    return length_delimited(
        1, length_delimited(1, Resource(attributes=attributes).SerializeToString())
    )


async def distinct_big_resources(server: Server, requests: int) -> tuple[float, float, float, int]:
    """Item 2: every request a new 60 KB resource (once a 15 MiB attribute: now refused)."""
    headers = {"Content-Type": "application/x-protobuf"}
    statuses: list[int] = []

    async def attack() -> None:
        for start in range(0, requests, 16):
            batch = [_big_resource(n) for n in range(start, min(start + 16, requests))]
            statuses.extend(await asyncio.gather(*(_otlp_post(server, b, headers) for b in batch)))

    idle, attacked, grown = await _under_attack(server, attack)
    return idle, attacked, grown, statuses.count(200)


def _small_json_export() -> bytes:
    document = {
        "resourceMetrics": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "small"}},
                {"key": "service.instance.id", "value": {"stringValue": "1"}},
            ]},
            "scopeMetrics": [{"metrics": [
                {"name": f"m{i}", "gauge": {"dataPoints": [{"asInt": str(i)}]}} for i in range(12)
            ]}],
        }]
    }  # fmt: skip
    return json.dumps(document).encode()


async def _export_ms(server: Server, body: bytes, local: str) -> float:
    started = time.perf_counter()
    status = await _otlp_post(server, body, {"Content-Type": "application/json"}, local)
    assert status == 200, status
    return (time.perf_counter() - started) * 1000


async def small_export_behind_big_ones(
    server: Server, big_per_sender: int
) -> tuple[float, float, float, float, float]:
    """Item 7: a 1 KB JSON export from 127.0.0.2 while two senders queue 1 MB JSON bodies."""
    small = _small_json_export()
    big = _bomb(1024 * 1024)
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    idle_export = statistics.median(
        [await _export_ms(server, small, "127.0.0.2") for _ in range(5)]
    )
    behind: list[float] = []

    async def attack() -> None:
        senders = [
            asyncio.ensure_future(_otlp_post(server, big, headers, local))
            for local in ("127.0.0.3", "127.0.0.4")
            for _ in range(big_per_sender)
        ]
        await asyncio.sleep(0.5)  # the big bodies are queued
        behind.extend([await _export_ms(server, small, "127.0.0.2") for _ in range(3)])
        await asyncio.gather(*senders)

    idle, attacked, grown = await _under_attack(server, attack)
    return idle_export, statistics.median(behind), idle, attacked, grown


async def run(quick: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="kip714-hostile-") as workdir:
        server = Server(Path(workdir))
        server.start()
        try:
            idle, attacked = await plain_flood(server, 50 if quick else 250)
            print(
                f"admin change:      idle {idle:8.1f} ms   during a "
                f"{50 if quick else 250}-attempt PLAIN flood {attacked:8.1f} ms   (goal < 1000)"
            )
            idle, attacked, landed = await rtt_under_bombs(server, 2 if quick else 8)
            print(
                f"Kafka RTT median:  idle {idle:8.2f} ms   while 14 MiB OTLP bodies decode "
                f"{attacked:8.2f} ms   (goal < 20; {landed} bombs answered 200)"
            )
            idle, refused = await describe_configs(server)
            print(
                f"DescribeConfigs:   1 resource {idle:6.2f} ms   300,000 resources refused in "
                f"{refused:6.2f} ms   (goal < 100)"
            )
            bodies = 8 if quick else 40
            idle, attacked, grown, refused_count = await empty_resource_floods(server, bodies)
            print(
                f"Kafka RTT p99:     idle {idle:8.2f} ms   while {bodies} zstd bodies of 8M empty "
                f"resources post {attacked:8.2f} ms   RSS +{grown:.0f} MiB   (goals < 100 ms, "
                f"< 64 MiB; {refused_count} refused 400)"
            )
            requests = 200 if quick else 2000
            idle, attacked, grown, landed = await distinct_big_resources(server, requests)
            print(
                f"Kafka RTT p99:     idle {idle:8.2f} ms   while {requests} new 60 KB resources "
                f"post {attacked:8.2f} ms   RSS +{grown:.0f} MiB   (goals < 100 ms, < 64 MiB; "
                f"{landed} answered 200)"
            )
            per_sender = 2 if quick else 6
            export_idle, export_behind, idle, attacked, grown = await small_export_behind_big_ones(
                server, per_sender
            )
            print(
                f"1 KB JSON export:  idle {export_idle:8.2f} ms   behind 2x{per_sender} 1 MB JSON "
                f"bodies {export_behind:8.2f} ms   Kafka RTT p99 idle {idle:.2f} ms, during "
                f"{attacked:.2f} ms   RSS +{grown:.0f} MiB   (goals < 100 ms, < 64 MiB)"
            )
        finally:
            server.stop()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer attackers and bombs")
    args = parser.parse_args(argv)
    asyncio.run(run(args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
