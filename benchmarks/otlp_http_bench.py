"""Acknowledged OTLP/HTTP requests/s and latency of ``kip714 serve``, against an aiohttp no-op.

``POST /v1/metrics`` with protobuf bodies of two sizes: a librdkafka-shaped
push (60 metrics, as ``_loadgen.build_metrics_data`` builds it) and an
SDK-shaped export (built by the OpenTelemetry Python SDK itself: counters,
gauges and histograms over a few attribute sets, encoded by its OTLP
encoder). For each size, in one run on the same machine:

1. **ceiling**: an aiohttp server whose handler reads the body and answers an
   empty ``ExportMetricsServiceResponse``, under closed-loop load
   (``--concurrency`` requests in flight);
2. **kip714**: ``kip714 serve`` (a subprocess; durable ingest log, the
   Iceberg landing on, its default exporter) under the same load, a fresh
   server on an empty data directory for every closed loop; with
   ``--exporters none`` the acknowledgement path alone, as ``ack_bench``
   measures the Kafka door (the landing's workers otherwise take their
   share of the same two cores);
3. **kip714 at half**: requests offered at half of kip714's closed-loop
   rate whatever the latency (latency counts from the intended send time).

The load generator is one process (aiohttp client); it shares the
machine's cores with the server, which the output states with the load
average. Targets: kip714 >= 50% of the ceiling; p99 < 20 ms at half rate.
kip714 answers a request only once it is fsynced, so in the closed loop its
rate is the requests in flight over a latency that includes a sync; the
no-op's is not. The share therefore grows with ``--concurrency``
(docs/architecture.md gives it at 32, 64 and 128 in flight).

    python3 benchmarks/otlp_http_bench.py            # about 1 minute
    python3 benchmarks/otlp_http_bench.py --quick    # smoke run
    python3 benchmarks/otlp_http_bench.py --rounds 5 # the median share of 5 alternations
    python3 benchmarks/otlp_http_bench.py --exporters none  # no landing beside
    python3 benchmarks/otlp_http_bench.py --flatten  # the landing's flattening alone

``--flatten`` measures what the default landing's worker does per request
before writing Parquet (``exporters.iceberg.rows``: the vectorised flattener
and the lake's row conversion), in CPU time, over batches of both bodies and
of the recorded librdkafka pushes (``/work/shared/data``, when present); the
target is <= 150 µs per 64-point request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import aiohttp
import psutil  # type: ignore[import-untyped,unused-ignore]
from aiohttp import web
from opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from pyiceberg.catalog import load_catalog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import build_metrics_data, percentile
from _stages import OTLP_STAGES, breakdown
from ack_bench import Kip714Server, push_path_build

from exporters.api import LoggedPush
from exporters.iceberg.rows import COALESCE_PUSHES
from exporters.iceberg.schema import to_lake_rows
from exporters.landing.fast import flatten_fast
from exporters.landing.flatten import flatten_to_table

if TYPE_CHECKING:
    from collections.abc import Iterator
    from multiprocessing.context import SpawnProcess

HOST: Final = "127.0.0.1"
ROUTE: Final = "/v1/metrics"
PROTOBUF: Final = "application/x-protobuf"
TARGET_CEILING_SHARE: Final = 0.5
TARGET_P99_S: Final = 0.020
TARGET_FLATTEN_US: Final = 150.0
RECORDED: Final = Path("/work/shared/data")


# -- request bodies -----------------------------------------------------------------------------


def librdkafka_sized() -> bytes:
    """A librdkafka producer push (60 metrics) as an OTLP request with a service resource."""
    data = build_metrics_data(random.Random(0))
    request = ExportMetricsServiceRequest()
    request.ParseFromString(data.SerializeToString())
    attribute = request.resource_metrics[0].resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", "bench-producer"
    return bytes(request.SerializeToString())


def sdk_sized() -> bytes:
    """One export of an SDK-instrumented service, encoded by the SDK's own OTLP encoder."""
    reader = InMemoryMetricReader()
    resource = Resource.create({"service.name": "bench-service", "service.instance.id": "1"})
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    meter = provider.get_meter("bench", "1.0")
    routes = [{"http.route": f"/api/v1/items/{i}", "http.method": "GET"} for i in range(4)]
    for index in range(10):
        counter = meter.create_counter(f"bench.requests.{index}")
        for attributes in routes:
            counter.add(index + 1, attributes)
    for index in range(4):
        histogram = meter.create_histogram(f"bench.duration.{index}", unit="ms")
        for attributes in routes:
            for value in (1, 7, 30, 120, 800):
                histogram.record(value, attributes)
    for index in range(4):
        gauge = meter.create_gauge(f"bench.queue.{index}")
        gauge.set(index * 3.5, {"queue": "a"})
        gauge.set(index * 1.5, {"queue": "b"})
    data = reader.get_metrics_data()
    assert data is not None
    body = bytes(encode_metrics(data).SerializeToString())
    provider.shutdown()
    return body


# -- the ceiling --------------------------------------------------------------------------------


def _noop_main(ready: multiprocessing.Queue[int]) -> None:
    async def export(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type=PROTOBUF)

    async def serve() -> None:
        app = web.Application()
        app.router.add_post(ROUTE, export)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, HOST, 0)
        await site.start()
        ready.put(int(runner.addresses[0][1]))
        await asyncio.Event().wait()

    with contextlib.suppress(ImportError):
        import uvloop  # noqa: PLC0415 - the same loop as kip714 serve

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(serve())


def start_noop() -> tuple[SpawnProcess, int]:
    context = multiprocessing.get_context("spawn")
    ready: multiprocessing.Queue[int] = context.Queue()
    process = context.Process(target=_noop_main, args=(ready,), daemon=True)
    process.start()
    return process, ready.get(timeout=30)


# -- the load -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadResult:
    ok: int
    failed: int
    seconds: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


async def _load(
    url: str, body: bytes, concurrency: int, rate: float, warmup_s: float, duration_s: float
) -> LoadResult:
    """Closed loop (``rate`` 0: ``concurrency`` requests in flight) or open loop at ``rate``."""
    latencies: list[float] = []
    counts = {"ok": 0, "failed": 0}
    loop = asyncio.get_running_loop()
    start = loop.time() + warmup_s
    end = start + duration_s
    headers = {"Content-Type": PROTOBUF}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(intended: float) -> None:
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                status = response.status
            done = loop.time()
            if start <= intended < end:
                counts["ok" if status == 200 else "failed"] += 1
                latencies.append(done - intended)

        async def closed_worker() -> None:
            while loop.time() < end:
                await one(loop.time())

        if rate <= 0:
            await asyncio.gather(*(closed_worker() for _ in range(concurrency)))
        else:
            tasks: set[asyncio.Task[None]] = set()
            interval, sent = 1.0 / rate, 0
            first = loop.time()
            while (due := first + sent * interval) < end:
                await asyncio.sleep(max(0.0, due - loop.time()))
                task = loop.create_task(one(due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                sent += 1
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    return LoadResult(counts["ok"], counts["failed"], duration_s, sorted(latencies))


def _load_main(
    results: multiprocessing.Queue[LoadResult], args: tuple[str, bytes, int, float, float, float]
) -> None:
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: PLC0415

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    results.put(asyncio.run(_load(*args)))


def run_load(
    url: str, body: bytes, concurrency: int, rate: float, warmup_s: float, duration_s: float
) -> LoadResult:
    """The load from its own process, so the generator never shares this one's loop."""
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[LoadResult] = context.Queue()
    args = (url, body, concurrency, rate, warmup_s, duration_s)
    process = context.Process(target=_load_main, args=(results, args), daemon=True)
    process.start()
    try:
        return results.get(timeout=warmup_s + duration_s + 60)
    finally:
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()


# -- the run ------------------------------------------------------------------------------------


def _children_cpu_seconds(server: Kip714Server) -> float:
    """CPU of the server's child processes (the landing's flattening workers)."""
    assert server.proc is not None
    total = 0.0
    for child in psutil.Process(server.proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system
    return total


def _process_cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def profile_stages(
    args: argparse.Namespace,
    server: Kip714Server,
    url: str,
    body: bytes,
    kind: str,
    per_request_us: tuple[float, float],
) -> None:
    """A profiled closed loop: the request's stages, scaled to the unprofiled CPU per request."""
    server.profile()
    try:
        profiled = run_load(url, body, args.concurrency, 0.0, args.warmup, args.duration)
    finally:
        server.profile()
    stages = breakdown(
        server.wait_profile(),
        OTLP_STAGES,
        requests=profiled.ok + profiled.failed,
        loop_us=per_request_us[0],
        threads_us=per_request_us[1],
        transport_us=0.0,
    )
    assert server.profile_to is not None
    server.profile_to.rename(server.profile_to.with_name(f"server-{kind}.pstats"))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    title = f"OTLP/HTTP {kind}-sized, load average {load}"
    path = stages.write(Path(args.profile), f"otlp_http_{kind}_stages", title)
    print("\n".join("  " + line for line in stages.table(title).splitlines()))
    print(f"  stage profile written to {path} (and .json)")


class FreshServers:
    """``kip714 serve`` processes, each on an empty data directory, removed once it stops.

    Every closed loop gets a new server, and removing the directory takes
    its log out of the page cache. With no exporter nothing consumes or
    deletes the log: on one server it grew by about 0.5 GB a loop, and once
    the page cache had grown past what this machine keeps warm, each fsync
    cost the writer thread four times the CPU (docs/architecture.md). A
    share measured then depended on the loops run before it, not on its
    request size.
    """

    def __init__(self, root: Path, exporters: str, profile_to: Path | None) -> None:
        self.root = root
        self.exporters = exporters
        self.profile_to = profile_to
        self.started = 0
        #: Rows the default landing committed, summed over the servers stopped so far.
        self.landed = 0

    @contextlib.contextmanager
    def fresh(self) -> Iterator[Kip714Server]:
        self.started += 1
        workdir = self.root / f"server-{self.started}"
        workdir.mkdir()
        server = Kip714Server(
            workdir, cache_size=16_384, exporters=self.exporters, profile_to=self.profile_to
        )
        try:
            server.start()
            yield server
        finally:
            server.stop()
            if self.exporters == "default":
                self.landed += landed_rows(workdir / "data")
            shutil.rmtree(workdir)


def measure(
    args: argparse.Namespace,
    servers: FreshServers,
    noop: tuple[int, int],
    kind: str,
    body: bytes,
) -> bool:
    """One request size: the no-op, kip714 closed, then kip714 at half (or its profile)."""
    noop_pid, noop_port = noop
    points = sum(
        len(getattr(m, m.WhichOneof("data")).data_points)
        for r in ExportMetricsServiceRequest.FromString(body).resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
    )
    print(f"\n{kind}: {len(body):,} bytes, {points} data points per request")
    timing = (args.concurrency, 0.0, args.warmup, args.duration)
    shares: list[float] = []
    rates: list[float] = []
    closed_failed = 0
    for round_number in range(1, args.rounds + 1):
        if args.rounds > 1:
            print(f"  round {round_number} of {args.rounds}")
        noop_before = _process_cpu_seconds(noop_pid)
        ceiling = run_load(f"http://{HOST}:{noop_port}{ROUTE}", body, *timing)
        noop_us = (_process_cpu_seconds(noop_pid) - noop_before) / max(ceiling.ok, 1) * 1e6
        print(_line("ceiling (aiohttp no-op)", ceiling))
        with servers.fresh() as server:
            kip714_url = f"http://{HOST}:{server.http_port}{ROUTE}"
            closed, (loop_us, threads_us) = closed_loop(server, kip714_url, body, timing, noop_us)
            shares.append(closed.rate / ceiling.rate if ceiling.rate else 0.0)
            rates.append(closed.rate)
            closed_failed += closed.failed
            if round_number < args.rounds:
                continue
            if args.profile:
                kind_name = kind.split("-", maxsplit=1)[0]
                profile_stages(args, server, kip714_url, body, kind_name, (loop_us, threads_us))
                return True
            rate = statistics.median(rates)
            half = run_load(
                kip714_url, body, args.concurrency, rate / 2, args.warmup, args.duration
            )
    print(_line("kip714 at half rate", half))
    # The median of the rounds: one closed loop's share moves by a few points run to run.
    share = statistics.median(shares)
    if args.rounds > 1:
        print(f"  shares of the ceiling by round: {', '.join(f'{s:.0%}' for s in shares)}")
    p99 = percentile(half.latencies, 0.99)
    passed = share >= TARGET_CEILING_SHARE and p99 < TARGET_P99_S
    print(
        f"  kip714 = {share:.0%} of the ceiling{' (median)' if args.rounds > 1 else ''}"
        f" (target >= 50%), p99 at half rate "
        f"{p99 * 1000:.2f} ms (target < 20 ms): {'met' if passed else 'NOT met'}"
    )
    return passed and not (closed_failed or half.failed)


def closed_loop(
    server: Kip714Server,
    url: str,
    body: bytes,
    timing: tuple[int, float, float, float],
    noop_us: float,
) -> tuple[LoadResult, tuple[float, float]]:
    """kip714's closed loop, with its CPU per request and its group commits printed."""
    metrics_before = server.metrics()
    before = (server.cpu_seconds(), _children_cpu_seconds(server), server.thread_cpu_seconds())
    closed = run_load(url, body, *timing)
    requests = max(closed.ok + closed.failed, 1)
    syncs = _sync_line(metrics_before, server.metrics(), requests)
    serving_us = (server.cpu_seconds() - before[0]) / requests * 1e6
    landing_us = (_children_cpu_seconds(server) - before[1]) / requests * 1e6
    loop_us, threads_us = (
        (after - earlier) / requests * 1e6
        for after, earlier in zip(server.thread_cpu_seconds(), before[2], strict=True)
    )
    print(_line("kip714", closed))
    print(
        f"  kip714 CPU per request: {serving_us:,.0f} µs in the server process (event loop"
        f" {loop_us:,.0f} µs), {landing_us:,.0f} µs in the landing's workers;"
        f" the aiohttp no-op's {noop_us:,.0f} µs"
    )
    print(syncs)
    return closed, (loop_us, threads_us)


def flatten_costs(bodies: dict[str, bytes], batch: int = COALESCE_PUSHES) -> bool:
    """CPU µs per push of the landing's flattening, in batches as its lanes gather them."""
    recorded = sorted(RECORDED.glob("*.otlp.bin")) if RECORDED.is_dir() else []
    payloads = {**bodies, **{path.name.split(".otlp")[0]: path.read_bytes() for path in recorded}}
    print(f"the landing's flattening, batches of {batch} pushes (CPU time, best of 5):")
    met = True
    for kind, payload in payloads.items():
        pushes = [
            LoggedPush(
                offset=index,
                client_instance_id="AAAAAAAAAAAAAAAAAAAAAA",
                subscription_id=0,
                client_id="bench",
                client_software_name="bench",
                client_software_version="1",
                client_source_address=HOST,
                client_source_port=1,
                principal="User:ANONYMOUS",
                received_time_ms=1_764_000_000_000 + index,
                push_interval_ms=0,
                terminating=False,
                content_type="OTLP",
                payload=payload,
            )
            for index in range(batch)
        ]
        best = float("inf")
        for _ in range(5):
            started = time.process_time()
            table, _, _ = flatten_to_table(pushes)
            rows, _ = to_lake_rows(table, "bench")
            best = min(best, time.process_time() - started)
        points = rows.num_rows // batch
        per_push = best / batch * 1e6
        fast = flatten_fast(pushes[:1])
        note = " (the reference flattener)" if fast is None or fast[2] else ""
        print(f"  {kind:<34} {points:3d} points: {per_push:7.1f} µs per push{note}")
        if kind == "SDK-sized":
            met = per_push <= TARGET_FLATTEN_US
            verdict = "met" if met else "NOT met"
            print(f"    target <= {TARGET_FLATTEN_US:.0f} µs per 64-point request: {verdict}")
    return met


def _sync_line(before: dict[str, float], after: dict[str, float], requests: int) -> str:
    """The log's group commits in a closed loop (warm-up included, as the CPU figures).

    Each fsync takes the writer thread's CPU on one of the two cores, so
    smaller groups or dearer fsyncs show here before they show in the share.
    """

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    count = delta("kip714_log_fsync_seconds_count")
    seconds = delta("kip714_log_fsync_seconds_sum")
    if count <= 0:
        return "  kip714 log: no fsync in the window"
    return (
        f"  kip714 log: {count:,.0f} fsyncs (avg {seconds / count * 1000:.2f} ms),"
        f" {requests / count:.1f} requests each"
    )


def _line(label: str, result: LoadResult) -> str:
    p50 = percentile(result.latencies, 0.50) * 1000
    p99 = percentile(result.latencies, 0.99) * 1000
    failed = f", {result.failed} not 200" if result.failed else ""
    figures = f"{result.rate:>8,.0f} req/s   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms"
    return f"  {label:<22} {figures}{failed}"


def landed_rows(data_dir: Path) -> int:
    """Rows the server's default landing committed to ``kip714.metrics`` (0 without a lake)."""
    lake = data_dir / "lake"
    if not (lake / "catalog.db").exists():
        return 0
    catalog = load_catalog("kip714", type="sql", uri=f"sqlite:///{lake}/catalog.db")
    return int(catalog.load_table(("kip714", "metrics")).scan().to_arrow().num_rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=6.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument("--quick", action="store_true", help="short phases, for a smoke run")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="closed loops of the no-op and kip714, alternated, per size; the median share counts",
    )
    parser.add_argument(
        "--exporters",
        choices=("default", "none"),
        default="default",
        help="the server's exporters: its default (the Iceberg landing) or none",
    )
    parser.add_argument(
        "--flatten",
        action="store_true",
        help="only the landing's flattening per request, in this process (no servers)",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="after each closed loop, a second one under a thread-CPU profile of the server:"
        " the per-stage breakdown of a request to DIR (otlp_http_<size>_stages.txt/.json);"
        " skips the half-rate phases",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.quick:
        args.duration, args.warmup = 2.0, 0.5
    bodies = {"librdkafka-sized": librdkafka_sized(), "SDK-sized": sdk_sized()}
    if args.flatten:
        print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.2f}")
        return 0 if flatten_costs(bodies) else 1
    load_before = os.getloadavg()
    print(
        f"cores: {os.cpu_count()}, load average before: {load_before[0]:.2f};"
        f" exporters: {args.exporters}; push path {push_path_build()};"
        f" closed loop: {args.concurrency} requests in flight"
    )
    noop, noop_port = start_noop()
    ok = True
    with tempfile.TemporaryDirectory(prefix="kip714-otlp-bench-") as workdir:
        profile_to = Path(args.profile).resolve() / "server.pstats" if args.profile else None
        if profile_to is not None:
            profile_to.parent.mkdir(parents=True, exist_ok=True)
            profile_to.unlink(missing_ok=True)
        servers = FreshServers(Path(workdir), args.exporters, profile_to)
        try:
            assert noop.pid is not None
            for kind, body in bodies.items():
                ok = measure(args, servers, (noop.pid, noop_port), kind, body) and ok
        finally:
            noop.terminate()
            noop.join(timeout=10)
        if args.exporters == "default":
            print(f"\nlanded rows (Iceberg, after SIGTERM, every server): {servers.landed:,}")
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f} (1 min), {load_after[1]:.2f} (5 min)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
