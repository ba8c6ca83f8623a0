"""What hostile traffic costs other clients of ``kip714 serve``, each beside an idle baseline.

One run, one ``kip714 serve`` subprocess (``[security]`` with PLAIN users,
an admin token), measurements each first idle then under attack:

1. **admin change during a PLAIN flood**: the time of an HTTP admin change
   (``POST /admin/subscriptions/...``, fsynced) while 250 connections send
   wrong PLAIN passwords (goal < 1 s);
2. **Kafka RTT while OTLP bombs decode**: ApiVersions round trips on one Kafka
   connection while gzip OTLP/JSON bodies that expand to 14 MiB (under the
   default 16 MiB bound) are posted (goal: median < 20 ms);
3. **refusing a 300,000-resource DescribeConfigs**: from the last byte sent to
   the connection's close, beside a one-resource DescribeConfigs answered
   (goal < 100 ms);
4. **Kafka RTT and RSS while connections hold partial 8 MiB frames** (issue 35
   item 3): connections from one address send the size prefix of an 8 MiB
   frame and 1 MiB of it, then stall; ApiVersions round trips from another
   address (goal: p99 < 100 ms) and the server's RSS growth (goal < 64 MiB).
5. **zstd pushes of 7 million empty points** (issue 35 item 4): Kafka
   ApiVersions RTT p99, idle and while bombers under a 10 KB/s quota
   (``push_byte_rate`` and ``push_decoded_byte_rate``) each send a ~1.2 KB
   push that decodes to 14 MB; then how many were accepted, throttled or
   held (muted), the decoded bytes logged, and the pushes the landing skipped
   whole for ``max_data_points_per_push`` (goal: RTT p99 < 100 ms, no row of
   a bomb landed).
6. **``kip714 lake query "select 1"`` on a 7 M-row lake** (700,000 with
   ``--quick``) beside an empty lake: the tables are registered lazily, so
   the goal is at most 0.5 s and 300 MiB more.
7. **Kafka RTT while ``/metrics`` is scraped** with 20,000 quota entities (OTLP
   resources with their own ``service.name`` under a default byte quota): the
   p99 of ApiVersions round trips during three concurrent scrape loops, beside
   the idle p99, and the server's RSS growth during the scrapes (goals: < 100 ms,
   < 64 MiB);
8. **an HTTP Basic wrong-password flood**: 150 connections guessing a PLAIN
   user's password on ``/v1/metrics``, beside the same client's proven (and
   remembered) Basic requests and ApiVersions round trips, idle and during the
   flood, with the RSS growth (goals: Kafka p99 < 100 ms, < 64 MiB).
9. **OTLP floods of empty resources** (issue 35, item 1): Kafka RTT p99 and
   the server's RSS growth while 1.4 KB zstd bodies of 8 million empty
   ``ResourceMetrics`` are posted (refused at the 1,001st);
10. **distinct big OTLP resources** (item 2): the same while anonymous
   requests each bring a new 60 KB resource (the identity cache keeps a
   digest per resource, within its byte bound);
11. **a small OTLP/JSON export behind big ones** (item 7): its latency from
   another address, idle and while two senders keep the decoding threads
   busy with 1 MB JSON bodies, with Kafka RTT p99 and RSS growth.

Targets for 4–6: Kafka RTT p99 < 100 ms, RSS growth < 64 MiB.

    python3 benchmarks/hostile_bench.py          # about a minute
    python3 benchmarks/hostile_bench.py --quick  # fewer attackers and bombs
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing
import os
import re
import socket
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
from tests.telemetry.http.test_http_otlp import length_delimited, otlp_request, resource_metrics
from tests.telemetry.kafka_wire_client import WireClient, zstd_stream
from tests.telemetry.server.test_decoded_bounds import empty_gauge_points

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from multiprocessing import Queue

HOST: Final = "127.0.0.1"
TOKEN: Final = "bench-token"
_SERVING: Final = re.compile(r"kafka=[^ ]+:(\d+) advertised=\S+ http=[^ ]+:(\d+)")


def _config() -> str:
    # The server's default PBKDF2 cost: what a real deployment pays per PLAIN attempt.
    secret = hash_password("right").encoded()
    return (
        '[subscriptions.bench]\nmetrics = ["*"]\n'
        f'[admin]\ntoken = "{TOKEN}"\n'
        # A default byte quota: every client id (an OTLP resource's service.name) is an entity.
        '[[quotas.clients]]\nclient_id = "<default>"\npush_byte_rate = 1000000000\n'
        "[security]\nallow_anonymous = true\n"
        f'[security.plain_users]\nbench = "{secret}"\n'
        # Row 4's sender: 10 KB/s as sent and decoded.
        '[[quotas.clients]]\nclient_id = "bomber"\n'
        "push_byte_rate = 10000\npush_decoded_byte_rate = 10000\n"
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
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _server_rss_mib(server: Server) -> float:
    assert server.proc is not None
    return _rss_mib(server.proc.pid)


def _stall(port: int, count: int) -> list[socket.socket]:
    """``count`` connections from HOST, each sending what fits of an 8 MiB frame's first MiB."""
    data = SIZE_PREFIX.pack(8 * 1024 * 1024) + b"\x01" * (1024 * 1024)
    peers = []
    for _ in range(count):
        peer = socket.create_connection((HOST, port), timeout=60)
        peer.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            peer.send(data)
        peers.append(peer)
    return peers


async def _rtts_from(server: Server, address: str, seconds: float) -> list[float]:
    reader, writer = await asyncio.open_connection(HOST, server.kafka, local_addr=(address, 0))
    request = ApiVersionsRequest(client_software_name="bench", client_software_version="1")
    rtts: list[float] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            writer.write(encode_request(_header(ApiKey.API_VERSIONS, 3, len(rtts)), request))
            await _read_frame(reader)
            rtts.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.005)
    finally:
        writer.close()
    return rtts


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else values[0]


async def partial_frames(server: Server, attackers: int) -> tuple[float, float, float]:
    """Kafka RTT p99 idle and while ``attackers`` hold partial frames; the RSS growth."""
    assert server.proc is not None
    idle = _p99(await _rtts_from(server, "127.0.0.2", 2.0))
    rss_before = _rss_mib(server.proc.pid)
    peers = await asyncio.to_thread(_stall, server.kafka, attackers)
    try:
        await asyncio.sleep(0.5)  # read up to the address's share, then paused
        attacked = _p99(await _rtts_from(server, "127.0.0.2", 3.0))
        growth = _rss_mib(server.proc.pid) - rss_before
    finally:
        for peer in peers:
            peer.close()
    return idle, attacked, growth


async def _scrape(server: Server) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{HOST}:{server.http}/metrics") as response,
    ):
        return await response.text()


def _metric(text: str, pattern: str) -> float:
    match = re.search(rf"^{pattern} (\S+)$", text, re.M)
    return float(match[1]) if match else 0.0


_ZSTD: Final = 4


async def _bomber(server: Server, bomb: bytes) -> str:
    """One bomber connection: its push accepted, throttled, or held (not answered in 10 s)."""
    client = await WireClient.connect(HOST, server.kafka, "bomber")
    try:
        subscription = await asyncio.wait_for(client.subscribe(), 10)
        answer = await asyncio.wait_for(
            client.push(subscription.client_instance_id, subscription.subscription_id, bomb, _ZSTD),
            10,
        )
    except (TimeoutError, AssertionError):
        return "held"
    finally:
        await client.close()
    if answer.error_code != 0:
        return "refused"
    return "throttled" if answer.throttle_time_ms > 0 else "accepted"


async def decoded_bombs(server: Server, bombers: int) -> tuple[float, float, dict[str, float]]:
    """Kafka RTT p99 idle and under bombs; what became of the bombs."""
    stop = asyncio.Event()
    idle = sorted(await _rtts(server, stop, 200))
    bomb = zstd_stream(empty_gauge_points(7_000_000))
    before = await _scrape(server)
    measuring = asyncio.ensure_future(_rtts(server, stop, 100_000))
    outcomes = await asyncio.gather(*(_bomber(server, bomb) for _ in range(bombers)))
    stop.set()
    attacked = sorted(await measuring)
    accepted = outcomes.count("accepted") + outcomes.count("throttled")
    skipped = (
        'kip714_landing_skipped_pushes_total{exporter="landing",reason="max_data_points_per_push"}'
    )
    deadline = time.monotonic() + 120
    after = await _scrape(server)
    while _metric(after, skipped) < accepted and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        after = await _scrape(server)
    figures = {
        "bomb_bytes": float(len(bomb)),
        "accepted": float(outcomes.count("accepted")),
        "throttled": float(outcomes.count("throttled")),
        "held": float(outcomes.count("held")),
        "refused": float(outcomes.count("refused")),
        "skipped": _metric(after, skipped) - _metric(before, skipped),
        "rows": _metric(after, r'kip714_exporter_stat\{exporter="landing",stat="rows_landed"\}')
        - _metric(before, r'kip714_exporter_stat\{exporter="landing",stat="rows_landed"\}'),
    }
    return idle[int(len(idle) * 0.99)], attacked[int(len(attacked) * 0.99)], figures


def _lake_with_rows(data_dir: Path, rows: int) -> None:
    """``<data_dir>/lake`` as the server makes it, ``kip714.metrics`` holding ``rows`` rows."""
    import pyarrow as pa  # noqa: PLC0415
    from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415

    lake = data_dir / "lake"
    (lake / "warehouse").mkdir(parents=True)
    catalog = SqlCatalog(
        "kip714", uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=(lake / "warehouse").as_uri()
    )
    catalog.create_namespace("kip714")
    schema = pa.schema(
        [("time", pa.timestamp("us", tz="UTC")), ("client_id", pa.string()),
         ("metric_name", pa.string()), ("value", pa.float64())]
    )  # fmt: skip
    table = catalog.create_table(("kip714", "metrics"), schema=schema)
    chunk = 1_000_000
    for first in range(0, rows, chunk):
        count = min(chunk, rows - first)
        table.append(
            pa.table(
                {
                    "time": pa.array([1_795_000_000_000_000 + i for i in range(count)],
                                     pa.timestamp("us", tz="UTC")),
                    "client_id": pa.array([f"client-{i % 100}" for i in range(count)]),
                    "metric_name": pa.array([f"org.apache.kafka.m{i % 50}" for i in range(count)]),
                    "value": pa.array([float(i) for i in range(count)]),
                },
                schema=schema,
            )
        )  # fmt: skip


def _select_one(data_dir: Path) -> tuple[float, float]:
    """Seconds and peak MiB of a ``kip714 lake query "select 1"`` process."""
    program = (
        "import resource, sys, time\n"
        "from telemetry.cli.lake import main\n"
        "start = time.monotonic()\n"
        f"code = main(['--data-dir', {str(data_dir)!r}, 'query', 'select 1'])\n"
        "print(time.monotonic() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    seconds, kib = done.stdout.split()[-2:]
    return float(seconds), int(kib) / 1024


def select_one_on_a_big_lake(workdir: Path, rows: int) -> tuple[tuple[float, float], ...]:
    """``select 1`` on an empty lake, then on one of ``rows`` rows: the tables are read lazily."""
    empty, big = workdir / "empty-lake", workdir / "big-lake"
    _lake_with_rows(empty, 0)
    _lake_with_rows(big, rows)
    return _select_one(empty), _select_one(big)


async def _peak_rss_mib(server: Server, stop: asyncio.Event) -> float:
    peak = _server_rss_mib(server)
    while not stop.is_set():
        await asyncio.sleep(0.05)
        peak = max(peak, _server_rss_mib(server))
    return peak


async def _make_entities(server: Server, entities: int) -> None:
    url = f"http://{HOST}:{server.http}/v1/metrics"
    headers = {"Content-Type": "application/x-protobuf"}
    async with aiohttp.ClientSession() as session:
        for first in range(0, entities, 1000):
            body = otlp_request(
                *(
                    resource_metrics({"service.name": f"e{n}"}, "m", 1)
                    for n in range(first, first + 1000)
                )
            )
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()


async def metrics_scrapes(server: Server, entities: int) -> tuple[float, float, float, int]:
    """Item 6: Kafka RTT p99 idle and during /metrics scrapes; RSS growth; the largest page."""
    await _make_entities(server, entities)
    stop = asyncio.Event()
    idle = _p99(await _rtts(server, stop, 200))
    before = _server_rss_mib(server)
    sizes: list[int] = []

    async def scrape(session: aiohttp.ClientSession) -> None:
        for _ in range(3):
            async with session.get(f"http://{HOST}:{server.http}/metrics") as response:
                sizes.append(len(await response.read()))

    measuring = asyncio.ensure_future(_rtts(server, stop, 100_000))
    watching = asyncio.ensure_future(_peak_rss_mib(server, stop))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(scrape(session) for _ in range(3)))
    stop.set()
    attacked = _p99(await measuring)
    return idle, attacked, await watching - before, max(sizes)


def _basic(password: str) -> dict[str, str]:
    token = base64.b64encode(f"bench:{password}".encode()).decode()
    return {"Content-Type": "application/x-protobuf", "Authorization": f"Basic {token}"}


async def _legit_basic_ms(
    server: Server, stop: asyncio.Event, count: int, body: bytes
) -> list[float]:
    url = f"http://{HOST}:{server.http}/v1/metrics"
    latencies = []
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            if stop.is_set():
                break
            started = time.perf_counter()
            async with session.post(url, data=body, headers=_basic("right")) as response:
                await response.read()
                assert response.status == 200, response.status
            latencies.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.02)
    return latencies


async def _guessing(url: str, stop_at: float, body: bytes, statuses: list[int]) -> None:
    guess = 0
    while time.monotonic() < stop_at:
        guess += 1
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with (
                aiohttp.ClientSession() as session,
                session.post(url, data=body, headers=_basic(f"guess-{guess}")) as response,
            ):
                await response.read()
                statuses.append(response.status)


def _guessers(url: str, attackers: int, seconds: float, answers: Queue[dict[int, int]]) -> None:
    """In a process of its own, so the attackers' client work does not skew the probes."""
    body = otlp_request(resource_metrics({"service.name": "basic-bench"}, "m", 1))
    statuses: list[int] = []

    async def flood() -> None:
        stop_at = time.monotonic() + seconds
        await asyncio.gather(*(_guessing(url, stop_at, body, statuses) for _ in range(attackers)))

    asyncio.run(flood())
    answers.put({status: statuses.count(status) for status in sorted(set(statuses))})


async def basic_flood(
    server: Server, attackers: int, seconds: float
) -> tuple[float, float, float, float, float, dict[int, int]]:
    """Item 8: Kafka RTT p99 and a proven Basic client's p99, idle and during a guessing flood."""
    body = otlp_request(resource_metrics({"service.name": "basic-bench"}, "m", 1))
    stop = asyncio.Event()
    await _legit_basic_ms(server, stop, 1, body)  # proven once, then remembered
    idle_rtt = _p99(await _rtts(server, stop, 200))
    idle_basic = _p99(await _legit_basic_ms(server, stop, 50, body))
    before = _server_rss_mib(server)
    spawn = multiprocessing.get_context("spawn")
    answers: Queue[dict[int, int]] = spawn.Queue()
    url = f"http://{HOST}:{server.http}/v1/metrics"
    flood = spawn.Process(target=_guessers, args=(url, attackers, seconds + 1.0, answers))
    flood.start()
    watching = asyncio.ensure_future(_peak_rss_mib(server, stop))
    await asyncio.sleep(1.0)  # the flood is under way: checks queued and hashing
    measuring = asyncio.ensure_future(_rtts(server, stop, 100_000))
    legit = asyncio.ensure_future(_legit_basic_ms(server, stop, 100_000, body))
    await asyncio.sleep(seconds - 0.5)
    stop.set()
    attacked_rtt, attacked_basic = _p99(await measuring), _p99(await legit)
    counts = await asyncio.to_thread(answers.get, True, 120)
    await asyncio.to_thread(flood.join, 30)
    return idle_rtt, attacked_rtt, idle_basic, attacked_basic, await watching - before, counts


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


def _big_resource_sender(http_port: int, requests: int, answers: Queue[list[int]]) -> None:
    """In a process of its own: building 60 KB resources must not delay the RTT probe's loop."""
    headers = {"Content-Type": "application/x-protobuf"}
    url = f"http://{HOST}:{http_port}/v1/metrics"
    statuses: list[int] = []

    async def post(session: aiohttp.ClientSession, body: bytes) -> int:
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
            return response.status

    async def send() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            for start in range(0, requests, 16):
                batch = [_big_resource(n) for n in range(start, min(start + 16, requests))]
                statuses.extend(await asyncio.gather(*(post(session, b) for b in batch)))

    asyncio.run(send())
    answers.put(statuses)


async def distinct_big_resources(server: Server, requests: int) -> tuple[float, float, float, int]:
    """Item 2: every request a new 60 KB resource (once a 15 MiB attribute: now refused)."""
    spawn = multiprocessing.get_context("spawn")
    answers: Queue[list[int]] = spawn.Queue()
    statuses: list[int] = []

    async def attack() -> None:
        sender = spawn.Process(target=_big_resource_sender, args=(server.http, requests, answers))
        sender.start()
        statuses.extend(await asyncio.to_thread(answers.get, True, 300))
        await asyncio.to_thread(sender.join, 30)

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
            attackers = 13 if quick else 100
            idle, attacked, growth = await partial_frames(server, attackers)
            print(
                f"Kafka RTT p99:     idle {idle:8.2f} ms   while {attackers} connections hold "
                f"partial 8 MiB frames {attacked:8.2f} ms   (goal < 100); "
                f"RSS +{growth:.1f} MiB (goal < 64)"
            )
            idle, attacked, bombs = await decoded_bombs(server, 4 if quick else 10)
            print(
                f"Kafka RTT p99:     idle {idle:8.2f} ms   while {4 if quick else 10} "
                f"{bombs['bomb_bytes']:.0f}-byte zstd pushes of 7 M points arrive "
                f"{attacked:8.2f} ms   (goal < 100)\n"
                f"                   bombs accepted {bombs['accepted']:.0f}, throttled "
                f"{bombs['throttled']:.0f}, held (muted) {bombs['held']:.0f}, refused "
                f"{bombs['refused']:.0f}; skipped whole by the landing {bombs['skipped']:.0f}, "
                f"rows landed {bombs['rows']:.0f}   (goal: 0 rows)"
            )
            idle, attacked, grown, page = await metrics_scrapes(server, 20_000)
            print(
                f"Kafka RTT p99:     idle {idle:8.2f} ms   during /metrics scrapes of 20,000 "
                f"entities {attacked:8.2f} ms   (goal < 100); RSS +{grown:.0f} MiB (goal < 64); "
                f"page {page / 1024:.0f} KiB"
            )
            seconds = 5.0 if quick else 20.0
            rtt, rtt_flood, basic, basic_flood_ms, grown, statuses = await basic_flood(
                server, 150, seconds
            )
            print(
                f"Kafka RTT p99:     idle {rtt:8.2f} ms   during a 150-connection Basic "
                f"wrong-password flood {rtt_flood:8.2f} ms   (goal < 100); RSS +{grown:.0f} MiB "
                f"(goal < 64)"
            )
            print(
                f"Basic client p99:  idle {basic:8.2f} ms   during the flood "
                f"{basic_flood_ms:8.2f} ms   (flood answers: {statuses})"
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
        rows = 700_000 if quick else 7_000_000
        (idle_s, idle_mib), (big_s, big_mib) = select_one_on_a_big_lake(Path(workdir), rows)
        print(
            f"lake query select 1: empty lake {idle_s:6.2f} s {idle_mib:6.0f} MiB   "
            f"{rows:,}-row lake {big_s:6.2f} s {big_mib:6.0f} MiB   "
            f"(goal: at most 0.5 s and 300 MiB more)"
        )
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer attackers and bombs")
    args = parser.parse_args(argv)
    asyncio.run(run(args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
