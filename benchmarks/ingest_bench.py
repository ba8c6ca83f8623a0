"""End-to-end ingest: simulated clients → ``kip714 serve`` → the landing (an Iceberg table).

The same load generator as ``ack_bench.py`` (``_loadgen``: librdkafka-shaped
60-metric zstd pushes over the Kafka protocol, from worker processes) offers
``--rate`` pushes/s in an open loop to ``kip714 serve`` whose only exporter
is the landing. Printed:

* the single-process limit, in this same run, of decompress + parse +
  flatten of the same payloads: the reference flattener (``otlp_rows``, into
  Python columns) and the landing's own path (into an Arrow table);
* sustained acknowledged pushes/s, and pushes/s and data points/s *landed*
  (the landing's committed log position, i.e. data in committed snapshots),
  sampled every 0.5 s: landing lag (log end − landed position) at the end of
  the window and its maximum, p99 acknowledgement latency;
* before the load: the RSS of the server process and of each landing
  worker 10 s after the server is ready (``--check``: against
  ``budget.json``'s ``idle_rss_mib``);
* peak RSS of the server and of its landing workers;
* after the load: time to drain the lag, rows landed == acknowledged
  pushes × 60, and bytes per data point on disk.

Targets: ≥ 4,000 pushes/s (≈ 240,000 data points/s) landed with a
bounded lag, at least the single-process flatten limit, ≤ 15 bytes per data
point. The load generator shares the 2 cores with the server; figures taken
while other work runs on the machine are noisy, and the output says how busy
the machine was.

    python3 benchmarks/ingest_bench.py                 # about 1 minute
    python3 benchmarks/ingest_bench.py --quick         # smoke run
    python3 benchmarks/ingest_bench.py --rate 5000 --duration 30
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import psutil  # type: ignore[import-untyped,unused-ignore]
import zstandard
from pyiceberg.catalog import load_catalog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import (
    METRICS_PER_PUSH,
    LoadSpec,
    PhaseResult,
    build_metrics_data,
    build_payloads,
    percentile,
    run_load,
    scrape_metrics,
)

from exporters.api import LoggedPush
from exporters.iceberg.rows import LakeRows, LaneConfig
from exporters.iceberg.schema import METRICS_TABLE
from exporters.landing import fast
from exporters.landing.flatten import flatten_to_table
from exporters.otlp_rows import flatten_batch

if TYPE_CHECKING:
    from collections.abc import Iterator

#: The idle footprint is read this long after the server is ready; the issue's bounds.
IDLE_AFTER_S: Final = 10.0
IDLE_RSS_SERVER_MIB: Final = 100
IDLE_RSS_WORKER_MIB: Final = 150
BUDGET: Final = Path(__file__).resolve().parent / "budget.json"
HOST: Final = "127.0.0.1"
INTERVAL_MS: Final = 100
MIB: Final = 1024 * 1024
TARGET_PUSHES: Final = 4_000
TARGET_BYTES_PER_POINT: Final = 15.0
_SERVING: Final = re.compile(r"kip714 serving: kafka=(\S+):(\d+) .*?http=(\S+):(\d+)")


# -- the single-process limit -------------------------------------------------------------------


def _pushes(payloads: list[bytes], count: int) -> list[tuple[bytes, LoggedPush]]:
    now_ms = int(time.time() * 1000)
    out = []
    for i in range(count):
        compressed = payloads[i % len(payloads)]
        push = LoggedPush(
            offset=i,
            client_instance_id=f"{random.Random(i % 500).getrandbits(128):032x}"[:22],
            subscription_id=1,
            client_id="kip714-bench-producer",
            client_software_name="kip714-bench",
            client_software_version="0.1.0",
            client_source_address="127.0.0.1",
            client_source_port=40000 + i % 500,
            principal=None,
            received_time_ms=now_ms,
            push_interval_ms=INTERVAL_MS,
            terminating=False,
            content_type="OTLP",
            payload=b"",
        )
        out.append((compressed, push))
    return out


def distinct_payloads(count: int) -> list[bytes]:
    """``count`` different pushes (fresh random values), compressed as ``_loadgen``'s."""
    rng = random.Random(714)
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=False)
    return [compressor.compress(build_metrics_data(rng).SerializeToString()) for _ in range(count)]


def bytes_per_point(payloads: list[bytes]) -> float:
    """Parquet bytes per data point for these pushes, written the landing's way (one data file)."""
    decompressor = zstandard.ZstdDecompressor()
    pushes = [
        _with_payload(push, decompressor.decompress(data, max_output_size=1 << 24))
        for data, push in _pushes(payloads, len(payloads))
    ]
    with workdir() as root:
        lane = LakeRows(LaneConfig(0, "bench", {METRICS_TABLE: f"file://{root}"}, {}, "b"))
        lane.batch(pushes, 0, None)
        files, _ = lane.write(0, len(pushes) - 1)
        size = sum(Path(f.location.removeprefix("file://")).stat().st_size for f in files)
        return size / max(sum(f.rows for f in files), 1)


def flatten_limit(payloads: list[bytes], seconds: float) -> tuple[float, float]:
    """Pushes/s of decompress + parse + flatten in this process: (reference, landing path)."""
    batch = _pushes(payloads, 1000)
    decompressor = zstandard.ZstdDecompressor()

    def decompress() -> list[LoggedPush]:
        return [
            _with_payload(push, decompressor.decompress(data, max_output_size=1 << 24))
            for data, push in batch
        ]

    rates = []
    for flatten in (flatten_batch, flatten_to_table):
        flatten(decompress())  # warm up
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            flatten(decompress())
            done += len(batch)
        rates.append(done / (time.perf_counter() - started))
    return rates[0], rates[1]


def _with_payload(push: LoggedPush, payload: bytes) -> LoggedPush:
    fields = {name: getattr(push, name) for name in LoggedPush.__slots__}
    fields["payload"] = payload
    return LoggedPush(**fields)


# -- the server under test ----------------------------------------------------------------------


def server_config(landing: Path, args: argparse.Namespace) -> str:
    options = [
        f"max_file_age_s = {args.file_age}",
        f"max_pending_rows = {args.max_rows}",
        f"workers = {args.workers}",
    ]
    return "\n".join(
        [
            "[subscriptions.bench]",
            'metrics = ["*"]',
            f'"interval.ms" = {INTERVAL_MS}',
            "[telemetry]",
            "instance_cache_size = 16384",
            "[log]",
            f"max_bytes = {8 * 1024 * MIB}",
            "[exporters.landing]",
            'type = "iceberg"',
            "[exporters.landing.options]",
            f'path = "{landing}"',
            *options,
            "",
        ]
    )


def landed_files(landing: Path) -> tuple[int, int, int]:
    """(files, rows, bytes) of what the landing committed."""
    lake = landing / "lake"
    catalog = load_catalog("kip714", type="sql", uri=f"sqlite:///{lake}/catalog.db")
    table = catalog.load_table(("kip714", "metrics"))
    tasks = list(table.scan().plan_files())
    rows = sum(t.file.record_count for t in tasks)
    return len(tasks), rows, sum(t.file.file_size_in_bytes for t in tasks)


@dataclass(slots=True)
class Server:
    workdir: Path
    args: argparse.Namespace
    proc: subprocess.Popen[str] | None = None
    http_port: int = 0
    kafka_port: int = 0
    tail: list[str] = field(default_factory=list)
    rss_server: int = 0
    rss_workers: int = 0
    _lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        config = self.workdir / "kip714.toml"
        config.write_text(server_config(self.workdir / "landing", self.args))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "telemetry", "serve", "--config", str(config),
             "--kafka-listen", f"{HOST}:0", "--http-listen", f"{HOST}:0",
             "--data-dir", str(self.workdir / "data"), "--log-format", "json"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stderr is not None
        threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True).start()
        deadline = time.monotonic() + 60
        while True:
            line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError("kip714 serve exited:\n" + "\n".join(self.tail[-20:]))
            match = _SERVING.search(line)
            if match:
                self.kafka_port, self.http_port = int(match[2]), int(match[4])
                break
        threading.Thread(target=self._sample_rss, daemon=True).start()

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            self.tail = [*self.tail[-49:], line.rstrip()]
            self._lines.put(line)
        self._lines.put(None)

    def _sample_rss(self) -> None:
        assert self.proc is not None
        process = psutil.Process(self.proc.pid)
        while not self._stop.wait(0.1):
            with contextlib.suppress(psutil.Error):
                self.rss_server = max(self.rss_server, process.memory_info().rss)
                workers = sum(c.memory_info().rss for c in process.children(recursive=True))
                self.rss_workers = max(self.rss_workers, workers)

    def metrics(self) -> dict[str, float]:
        return scrape_metrics(HOST, self.http_port)

    def cpu_s(self) -> tuple[float, float]:
        """CPU seconds so far of (the server process, its landing workers)."""
        assert self.proc is not None
        process = psutil.Process(self.proc.pid)
        own = process.cpu_times()
        workers = 0.0
        with contextlib.suppress(psutil.Error):
            for child in process.children(recursive=True):
                times = child.cpu_times()
                workers += times.user + times.system
        return float(own.user + own.system), workers

    def landed(self) -> tuple[float, float]:
        """(log end, landed position) of the landing, in pushes."""
        values = self.metrics()
        end = values.get("kip714_log_end_offset", 0.0)
        return end, end - values.get('kip714_exporter_lag_pushes{exporter="landing"}', 0.0)

    def stop(self) -> int | None:
        self._stop.set()
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


@dataclass(slots=True)
class Sampler:
    """Landed position every 0.5 s during the window, from the server's /metrics."""

    server: Server
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # t, end, landed
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    busy: list[float] = field(default_factory=list)
    cpu: list[tuple[float, float]] = field(default_factory=list)

    def start(self) -> None:
        self.busy.append(_busy_cpu_s())
        self.cpu.append(self.server.cpu_s())
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.samples.append((time.monotonic(), *self.server.landed()))
            if self._stop.wait(0.5):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.busy.append(_busy_cpu_s())
        self.cpu.append(self.server.cpu_s())
        with contextlib.suppress(OSError):
            self.samples.append((time.monotonic(), *self.server.landed()))


def _busy_cpu_s() -> float:
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kip714-ingest-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _ok(ok: bool) -> str:
    return "ok" if ok else "MISS"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=4_400.0, help="offered pushes/s (open loop)")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--processes", type=int, default=2, help="load-generator processes")
    parser.add_argument("--connections", type=int, default=100, help="per load process")
    parser.add_argument("--instances", type=int, default=1_200, help="client instances")
    parser.add_argument("--workers", type=int, default=1, help="landing worker processes")
    parser.add_argument("--file-age", type=float, default=10.0, help="max_file_age_s")
    parser.add_argument("--max-rows", type=int, default=2_000_000, help="max_pending_rows")
    parser.add_argument("--limit-seconds", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a figure exceeds budget.json's (idle_rss_mib) beyond its tolerance",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.limit_seconds, args.file_age = 4.0, 1.0, 1.0, 1.0
    if not (0 < args.duration <= 600 and 0 < args.rate <= 50_000 and args.processes <= 8):
        parser.error("bounded: 0 < --duration <= 600, --rate <= 50000, --processes <= 8")
    return args


def idle_rss(server: Server) -> dict[str, Any]:
    """RSS (MiB) of the server process and of each landing worker ``IDLE_AFTER_S`` after ready.

    Called as soon as the server is ready, before any load: what an idle
    ``kip714 serve`` keeps resident (docs/architecture.md "Processes").
    The workers are the server's spawned children (not multiprocessing's
    resource tracker).
    """
    assert server.proc is not None
    time.sleep(IDLE_AFTER_S)
    process = psutil.Process(server.proc.pid)
    workers = [c for c in process.children() if "spawn_main" in " ".join(c.cmdline())]
    figures = {
        "server": round(process.memory_info().rss / MIB, 1),
        "workers": [round(w.memory_info().rss / MIB, 1) for w in workers],
    }
    print(
        f"{'idle RSS, 10 s after ready':<30}: server {figures['server']:.0f} MiB, landing"
        f" worker(s) {', '.join(f'{w:.0f}' for w in figures['workers']) or 'none'} MiB"
        f" (bounds: server <= {IDLE_RSS_SERVER_MIB} MiB, worker <= {IDLE_RSS_WORKER_MIB} MiB)",
        flush=True,
    )
    return figures


def check_idle_rss(figures: dict[str, Any]) -> int:
    """0 when the idle RSS is within ``budget.json``'s ``idle_rss_mib`` and its tolerance."""
    budget = json.loads(BUDGET.read_text())["idle_rss_mib"]
    allowed = 1 + budget["tolerance"]
    verdicts = [("server", figures["server"], budget["server"] * allowed)] + [
        ("worker", worker, budget["worker"] * allowed) for worker in figures["workers"]
    ]
    for name, value, limit in verdicts:
        verdict = _ok(value <= limit)
        print(f"budget idle_rss_mib {name}: {value:.0f} MiB, limit {limit:.0f} [{verdict}]")
    return 0 if all(value <= limit for _, value, limit in verdicts) else 1


def load_phase(
    server: Server, sampler: Sampler, args: argparse.Namespace
) -> tuple[PhaseResult, int, float, int | None]:
    """Offer the load, then wait for the landing to drain; (result, acked, drain s, exit code)."""
    try:
        server.start()
        args.idle_rss = idle_rss(server)
        spec = LoadSpec(
            host=HOST,
            port=server.kafka_port,
            mode="open",
            connections=args.connections * args.processes,
            instances=max(args.instances, args.connections * args.processes),
            rate=args.rate,
            warmup_s=args.warmup,
            duration_s=args.duration,
        )
        result = run_load(
            spec, args.processes, at_window_start=sampler.start, at_window_end=sampler.stop
        )
        if result.errors:
            raise RuntimeError("; ".join(result.errors))
        acked = sum(w.acked_total for w in result.workers)
        drain_started = time.monotonic()
        end, landed = server.landed()
        while landed < end and time.monotonic() - drain_started < 120:
            time.sleep(0.25)
            end, landed = server.landed()
        drained_s = time.monotonic() - drain_started
        code = server.stop()
    except Exception:
        print("kip714 serve's last lines:", *server.tail[-10:], sep="\n  ", file=sys.stderr)
        raise
    finally:
        server.stop()
    return result, acked, drained_s, code


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    payloads = build_payloads(8)
    print(
        f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} before the run;"
        f" payload {METRICS_PER_PUSH} metrics, {sum(map(len, payloads)) // len(payloads):,} B zstd;"
        f" offered {args.rate:,.0f} pushes/s for {args.duration:g} s (+{args.warmup:g} s warm-up);"
        f" landing workers {args.workers}; vectorised flattener: {fast.available()}",
        flush=True,
    )
    distinct = distinct_payloads(1000)
    reference, landing_path = flatten_limit(distinct, args.limit_seconds)
    realistic_size = bytes_per_point(distinct)
    print(
        f"{'single-process flatten limit':<30}: reference (otlp_rows) {reference:,.0f} pushes/s"
        f" = {reference * METRICS_PER_PUSH:,.0f} data points/s; landing path (to Arrow)"
        f" {landing_path:,.0f} pushes/s = {landing_path * METRICS_PER_PUSH:,.0f} data points/s",
        flush=True,
    )
    with workdir() as path:
        server = Server(path, args)
        sampler = Sampler(server)
        result, acked, drained_s, code = load_phase(server, sampler, args)
        samples = sampler.samples
        (t0, _, landed0), (t1, _, landed1) = samples[0], samples[-1]
        window = max(t1 - t0, 1e-9)
        landed_rate = (landed1 - landed0) / window
        lags = [end - landed for _, end, landed in samples]
        machine = (sampler.busy[1] - sampler.busy[0]) / window if len(sampler.busy) == 2 else 0.0
        (server0, workers0), (server1, workers1) = sampler.cpu[0], sampler.cpu[-1]
        server_cores, worker_cores = (server1 - server0) / window, (workers1 - workers0) / window
        generation = args.max_rows * args.workers / METRICS_PER_PUSH
        bounded = max(lags) <= generation + 2 * args.rate and drained_s < 60
        files, rows, size = landed_files(path / "landing")
        ordered = result.latencies()
        p99 = percentile(ordered, 0.99)
        print(
            f"{'acknowledged':<30}: {result.rate:,.0f} pushes/s, p50"
            f" {percentile(ordered, 0.5) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms,"
            f" refused {result.refused}",
            flush=True,
        )
        print(
            f"{'landed (committed)':<30}: {landed_rate:,.0f} pushes/s ="
            f" {landed_rate * METRICS_PER_PUSH:,.0f} data points/s; lag at window end"
            f" {lags[-1]:,.0f} pushes, max {max(lags):,.0f}, {len(samples)} samples;"
            f" drained in {drained_s:.1f} s after the load",
            flush=True,
        )
        print(
            f"{'peak RSS':<30}: server {server.rss_server / MIB:.0f} MiB, landing workers"
            f" {server.rss_workers / MIB:.0f} MiB; machine busy {machine:.2f} of"
            f" {os.cpu_count()} cores in the window (server {server_cores:.2f},"
            f" landing workers {worker_cores:.2f})",
            flush=True,
        )
        print(
            f"{'on disk':<30}: {files} files, {rows:,} rows for {acked:,} acknowledged pushes"
            f" (x{METRICS_PER_PUSH} = {acked * METRICS_PER_PUSH:,}),"
            f" {size / max(rows, 1):.2f} bytes/data point (the generator repeats 8 payloads);"
            f" {realistic_size:.2f} bytes/data point for 1,000 distinct pushes; server exit {code}",
            flush=True,
        )
        limit = landing_path if fast.available() else reference
        print(
            f"targets: >={TARGET_PUSHES:,} pushes/s landed [{_ok(landed_rate >= TARGET_PUSHES)}],"
            f" >= single-process reference flatten limit {reference:,.0f}/s"
            f" [{_ok(landed_rate >= reference)}], lag bounded"
            f" (<= one generation of {generation:,.0f} pushes + 2 s of load) [{_ok(bounded)}],"
            f" <={TARGET_BYTES_PER_POINT:g} B/dp"
            f" [{_ok(realistic_size <= TARGET_BYTES_PER_POINT)}],"
            f" every acknowledged data point landed [{_ok(rows == acked * METRICS_PER_PUSH)}]"
            f"{' (quick run)' if args.quick else ''}",
            flush=True,
        )
        print(
            "json:",
            json.dumps(
                {
                    "acked_rate": round(result.rate),
                    "landed_pushes_s": round(landed_rate),
                    "landed_points_s": round(landed_rate * METRICS_PER_PUSH),
                    "lag_end": lags[-1],
                    "lag_max": max(lags),
                    "p99_ms": round(p99 * 1000, 2),
                    "limit_reference": round(reference),
                    "limit_landing": round(limit),
                    "bytes_per_point": round(realistic_size, 2),
                    "rss_server_mib": round(server.rss_server / MIB),
                    "rss_workers_mib": round(server.rss_workers / MIB),
                    "server_cores": round(server_cores, 2),
                    "worker_cores": round(worker_cores, 2),
                }
            ),
            flush=True,
        )
    if args.check:
        return check_idle_rss(args.idle_rss)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
