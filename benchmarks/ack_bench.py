"""Acknowledged PushTelemetry throughput and latency of ``kip714 serve``, against a bare ceiling.

Simulated KIP-714 clients (``_loadgen``: worker processes, each an asyncio loop
with many connections) push librdkafka-shaped 60-metric zstd payloads over
the Kafka protocol. Phases, in one run:

1. **ceiling**: a bare ``asyncio.Protocol`` responder on the event loop and
   transport ``kip714 serve`` uses (uvloop), splitting the same Kafka frames
   out of one buffer and answering each with a canned response, under the
   closed-loop load below; kip714's share of it is what kip714's own work
   (decoding, the KIP-714 checks, the durable log) costs;
2. **kip714 closed loop**: ``kip714 serve`` (a subprocess, durable ingest log
   with group-committed fsyncs) under as many pushes as it can acknowledge;
   each instance pushes once its push interval (100 ms) has passed, with one
   request in flight per connection;
3. **kip714 open loop**: pushes offered at ``--rate`` whatever the latency;
   latency counts from the intended send time;
4. **cached instances**: ``--cached-instances`` fresh instances GET and push
   once, then stay connected while the server's RSS and instance count are read.

The server's RSS is sampled (psutil, every 50 ms) for the whole run; fsyncs
and appends come from its ``/metrics`` before and after each window.

Targets: >= 8,000 acknowledged pushes/s with durable logging; p99 < 20 ms
at 4,000 pushes/s; >= 50% of the bare-server ceiling; RSS < 300 MiB with
16,384 cached instances. The load generator shares the machine's cores with
the server, which the output states.

    python3 benchmarks/ack_bench.py                 # full run, about 1 minute
    python3 benchmarks/ack_bench.py --quick         # smoke run
    python3 benchmarks/ack_bench.py --duration 20 --processes 2 --connections 200
    python3 benchmarks/ack_bench.py --log both      # local log, then the log in Kafka

``--log kafka`` (or ``both``: the local log first, then Kafka, in one run)
starts a real Kafka broker (``tests/kafka/kafka_dist.py``, cached jars) and
runs the closed and open loops against ``[log] store = "kafka"`` (pushes
acknowledged after ``acks=all``; the landing off, as that mode requires);
``both`` ends with the Kafka log's acknowledged pushes/s as a share of the
local log's, and its p99. The broker's JVM shares the machine's cores: its
CPU in each window is shown apart from other load ("the Kafka broker").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import (
    METRICS_PER_PUSH,
    LoadSpec,
    PhaseResult,
    build_payloads,
    percentile,
    run_load,
    scrape_metrics,
    start_bare_server,
)
from _stages import KAFKA_STAGES, breakdown, kernel_cpu, thread_cpu

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

HOST: Final = "127.0.0.1"
#: The committed per-push CPU of the closed loop, as a ratio to the bare responder's.
BUDGET: Final = Path(__file__).resolve().parent / "budget.json"
INTERVAL_MS: Final = 100
MIB: Final = 1024 * 1024
TARGET_RATE: Final = 8_000
TARGET_P99_S: Final = 0.020
TARGET_CEILING_SHARE: Final = 0.5
TARGET_RSS: Final = 300 * MIB
_SERVING: Final = re.compile(r"kip714 serving: kafka=(\S+):(\d+) .*?http=(\S+):(\d+)")


# -- the server under test ----------------------------------------------------------------------


#: Every client under a quota it never reaches: each request is recorded and checked
#: against all three quota kinds (enforcement on), and none is throttled.
QUOTAS_EVERY_CLIENT: Final = (
    '\n[[quotas.clients]]\nclient_id = "<default>"\npush_byte_rate = 1e12\n'
    "request_percentage = 1e9\ncontroller_mutation_rate = 1e9\n"
)


def server_config(
    cache_size: int, exporters: str, quotas: bool = False, kafka_log: str | None = None
) -> str:
    """A subscription at Kafka's minimum interval, so the push gate never limits the load.

    ``kafka_log``: the bootstrap servers of a ``[log] store = "kafka"`` (the landing off).
    """
    log = (
        [f'store = "kafka"\nbootstrap_servers = "{kafka_log}"\ntopic = "_kip714_bench"']
        if kafka_log is not None
        else [f"max_bytes = {64 * 1024 * MIB}"]  # no exporter consumes: keep every push
    )
    lines = [
        "[subscriptions.bench]",
        'metrics = ["*"]',
        f'"interval.ms" = {INTERVAL_MS}',
        "",
        "[telemetry]",
        f"instance_cache_size = {cache_size}",
        "",
        "[log]",
        *log,
        "",
    ]
    if exporters == "none" or kafka_log is not None:
        # None: the acknowledgement path only (exporters add to the landing, so turn it off).
        lines += ["[exporters.landing]", "enabled = false"]
    return "\n".join(lines) + "\n" + (QUOTAS_EVERY_CLIENT if quotas else "")


@dataclass(slots=True)
class RssSampler:
    """Samples a process's RSS in a thread; ``peak`` overall and per labelled phase."""

    process: psutil.Process
    interval_s: float = 0.05
    peak: int = 0
    phase: str = "start"
    peaks: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def sample(self) -> int:
        try:
            rss = int(self.process.memory_info().rss)
        except psutil.Error:
            return 0
        self.peak = max(self.peak, rss)
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), rss)
        return rss

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


def push_path_build() -> str:
    """Whether ``kip714 serve`` started from here runs the compiled push path.

    ``python -m`` puts the working directory first on the path, so a
    checkout's uncompiled sources there win over an installed build.
    """
    probe = subprocess.run(
        [sys.executable, "-c", "import telemetry.kafka.connection as m; print(m.__file__)"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return "uncompiled" if probe.stdout.strip().endswith(".py") else "compiled (mypyc)"


class Kip714Server:
    """``kip714 serve`` as a subprocess: started, scraped, and always stopped."""

    def __init__(
        self,
        workdir: Path,
        cache_size: int,
        exporters: str,
        *,
        quotas: bool = False,
        profile_to: Path | None = None,
        kafka_log: str | None = None,
        broker_pid: int | None = None,
    ) -> None:
        config = workdir / "kip714.toml"
        #: The run's own Kafka broker (``--log kafka``): its CPU is shown apart from other load.
        self.broker = psutil.Process(broker_pid) if broker_pid is not None else None
        config.write_text(server_config(cache_size, exporters, quotas, kafka_log))
        #: With ``profile_to``, the server runs under ``_cpu_profile.py``: see :meth:`profile`.
        self.profile_to = profile_to
        launcher = (
            ["-m", "telemetry"]
            if profile_to is None
            else [str(Path(__file__).resolve().parent / "_cpu_profile.py"), str(profile_to)]
        )
        self.command = [
            sys.executable,
            *launcher,
            "serve",
            "--kafka-listen",
            f"{HOST}:0",
            "--http-listen",
            f"{HOST}:0",
            "--data-dir",
            str(workdir / "data"),
            "--config",
            str(config),
            "--log-format",
            "json",
        ]
        self.proc: subprocess.Popen[str] | None = None
        self.kafka_port = 0
        self.http_port = 0
        self.log_tail: list[str] = []
        self.warnings = 0
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.sampler: RssSampler | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stderr is not None
        threading.Thread(
            target=self._drain, args=(self.proc.stderr,), name="kip714-stderr", daemon=True
        ).start()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"kip714 serve not ready in {timeout_s:.0f} s") from None
            if line is None:
                tail = "\n".join(self.log_tail[-20:])
                raise RuntimeError(f"kip714 serve exited with {self.proc.wait()}:\n{tail}")
            match = _SERVING.search(line)
            if match:
                self.kafka_port, self.http_port = int(match[2]), int(match[4])
                break
        self.sampler = RssSampler(psutil.Process(self.proc.pid))
        self.sampler.start()

    def _drain(self, stream: IO[str]) -> None:
        ready = False
        for line in stream:
            self.log_tail = [*self.log_tail[-49:], line.rstrip()]
            if '"level": "warning"' in line or '"level": "error"' in line:
                self.warnings += 1
            if not ready:
                self._lines.put(line)
                ready = _SERVING.search(line) is not None
        self._lines.put(None)

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as ``{'name{labels}': value}`` (simple Prometheus text parsing)."""
        return scrape_metrics(HOST, self.http_port)

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)

    def thread_cpu_seconds(self) -> tuple[float, float]:
        """CPU seconds of the event loop thread and of the server's other threads."""
        assert self.proc is not None
        return thread_cpu(self.proc.pid)

    def kernel_cpu_seconds(self) -> tuple[float, float]:
        """The kernel's part of :meth:`thread_cpu_seconds` (system time)."""
        assert self.proc is not None
        return kernel_cpu(self.proc.pid)

    def profile(self) -> None:
        """Start the thread-CPU profile, or (the second time) stop it and write ``profile_to``."""
        assert self.proc is not None
        assert self.profile_to is not None
        self.proc.send_signal(signal.SIGUSR2)

    def wait_profile(self, timeout_s: float = 60.0) -> Path:
        assert self.profile_to is not None
        deadline = time.monotonic() + timeout_s
        while not self.profile_to.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not self.profile_to.exists():
            raise RuntimeError(f"the server wrote no profile in {timeout_s:.0f} s")
        return self.profile_to

    def stop(self) -> int | None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def _busy_cores_seconds() -> float:
    """CPU seconds the whole machine has spent busy (not idle, not waiting on I/O)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


@dataclass(slots=True)
class Window:
    """Server-side figures over a measured window: metrics deltas, CPU of server and machine."""

    process: psutil.Process
    server: Kip714Server | None = None
    before: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)
    cpu: list[float] = field(default_factory=list)  # server, machine, this process; at each edge
    #: The run's own Kafka broker's CPU seconds at each edge (``--log kafka``).
    broker: list[float] = field(default_factory=list)
    #: The server's (event loop thread, other threads) CPU seconds at each edge.
    threads: list[tuple[float, float]] = field(default_factory=list)
    #: The kernel's part of ``threads`` (system time), at each edge.
    kernel: list[tuple[float, float]] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    def _edge(self) -> None:
        own = psutil.Process()
        self.cpu += [
            float(sum(self.process.cpu_times()[:2])),
            _busy_cores_seconds(),
            float(sum(own.cpu_times()[:2])),
        ]
        if self.server is not None:
            self.threads.append(self.server.thread_cpu_seconds())
            self.kernel.append(self.server.kernel_cpu_seconds())
            if self.server.broker is not None:
                with contextlib.suppress(psutil.Error):
                    self.broker.append(float(sum(self.server.broker.cpu_times()[:2])))

    def open(self) -> None:
        self.started = time.monotonic()
        if self.server is not None:
            self.before = self.server.metrics()
        self._edge()

    def close(self) -> None:
        self.ended = time.monotonic()
        self._edge()
        if self.server is not None:
            self.after = self.server.metrics()

    def delta(self, name: str) -> float:
        return self.after.get(name, 0.0) - self.before.get(name, 0.0)

    @property
    def seconds(self) -> float:
        return max(self.ended - self.started, 1e-9)

    @property
    def server_cores(self) -> float:
        return (self.cpu[3] - self.cpu[0]) / self.seconds

    def per_request_us(self, requests: int, *, kernel: bool = False) -> tuple[float, float]:
        """Server CPU per request: (event loop thread, other threads), µs; the kernel's part."""
        (loop0, other0), (loop1, other1) = self.kernel if kernel else self.threads
        n = max(requests, 1)
        return (loop1 - loop0) / n * 1e6, (other1 - other0) / n * 1e6

    @property
    def broker_cores(self) -> float | None:
        """The run's own Kafka broker's cores in the window (None without one)."""
        if len(self.broker) != 2:
            return None
        return (self.broker[1] - self.broker[0]) / self.seconds

    def other_cores(self, generator_cores: float) -> float:
        """Cores busy with anything but the server, the generator, the run's broker and this
        coordinator."""
        machine = (self.cpu[4] - self.cpu[1]) / self.seconds
        coordinator = (self.cpu[5] - self.cpu[2]) / self.seconds
        broker = self.broker_cores or 0.0
        return max(0.0, machine - self.server_cores - generator_cores - coordinator - broker)

    def cpu_note(self, result: PhaseResult) -> str:
        generator = result.generator_cpu_share()
        note = f"server {self.server_cores:.2f} cores, generator {generator:.2f} cores"
        if self.broker_cores is not None:
            note += f", the Kafka broker {self.broker_cores:.2f} cores"
        other = self.other_cores(generator)
        if other >= 0.15:
            note += f", OTHER LOAD on the machine {other:.2f} cores"
        return note


# -- phases --------------------------------------------------------------------------------------


def _py_spy(pid: int, seconds: float) -> list[str]:
    duration = str(max(1, int(seconds)))
    return ["py-spy", "record", "--pid", str(pid), "--duration", duration, "--rate", "200",
            "--threads", "--nonblocking", "--format", "raw"]  # fmt: skip


def run_window(
    spec: LoadSpec,
    processes: int,
    server: Kip714Server,
    profile: str | None = None,
    *,
    at_start: Callable[[], None] | None = None,
    at_end: Callable[[], None] | None = None,
) -> tuple[PhaseResult, Window]:
    """One measured phase; with ``profile``, py-spy samples the server during the window."""
    assert server.proc is not None
    pid = server.proc.pid
    window = Window(psutil.Process(pid), server)
    spy: list[subprocess.Popen[bytes]] = []

    def closed() -> None:
        if at_end is not None:
            at_end()
        window.close()

    def opened() -> None:
        window.open()
        if at_start is not None:
            at_start()
        if profile:
            spy.append(
                subprocess.Popen(
                    [*_py_spy(pid, spec.duration_s), "--output", profile],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

    try:
        result = run_load(spec, processes, at_window_start=opened, at_window_end=closed)
    finally:
        for proc in spy:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
    if result.errors:
        raise RuntimeError("; ".join(result.errors))
    if profile:
        print(
            f"py-spy profile of the server (collapsed stacks): {profile};"
            " the sampler shares the cores, so the next figures are perturbed",
            flush=True,
        )
    return result, window


def _fsyncs(per_s: float, average_s: float, appends: float) -> str:
    if not per_s:
        return "no fsyncs (the log in Kafka)"
    return f"{per_s:,.0f} fsyncs/s (avg {_ms(average_s)}, {appends / per_s:.1f} pushes each)"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _latency(result: PhaseResult) -> tuple[float, float]:
    ordered = result.latencies()
    return percentile(ordered, 0.50), percentile(ordered, 0.99)


def _refused(result: PhaseResult) -> str:
    """Refused pushes in the window, by Kafka error code (89: refused by the push gate)."""
    codes: dict[int, int] = {}
    for worker in result.workers:
        for code, count in worker.refused.items():
            codes[code] = codes.get(code, 0) + count
    detail = ", ".join(f"error {code}: {count:,}" for code, count in sorted(codes.items()))
    return f"refused {result.refused:,}" + (f" ({detail})" if detail else "")


def _checks(result: PhaseResult) -> str:
    notes = []
    unanswered = sum(w.unanswered for w in result.workers)
    lost = sum(w.lost_connections for w in result.workers)
    backlog = max(w.backlog_max for w in result.workers)
    if unanswered:
        notes.append(f"{unanswered} unanswered at the end")
    if lost:
        notes.append(f"{lost} connections lost")
    if backlog > 1:
        notes.append(f"offered pushes waited for a free instance: up to {backlog:,}")
    return f" [{', '.join(notes)}]" if notes else ""


@dataclass(slots=True)
class Figures:
    ceiling: float = 0.0
    closed_rate: float = 0.0
    open_rate: float = 0.0
    open_p99: float = float("nan")
    rss_cached: int = 0
    rss_peak: int = 0
    cached: int = 0
    #: CPU per push, µs: the bare responder's; kip714's event loop thread and other threads.
    ceiling_cpu_us: float = 0.0
    loop_us: float = 0.0
    threads_us: float = 0.0

    @property
    def cpu_us(self) -> float:
        return self.loop_us + self.threads_us

    @property
    def cpu_ratio(self) -> float:
        """kip714's server CPU per push as a multiple of the bare responder's."""
        return self.cpu_us / self.ceiling_cpu_us if self.ceiling_cpu_us else float("nan")


def _closed_spec(args: argparse.Namespace, port: int) -> LoadSpec:
    return LoadSpec(
        host=HOST,
        port=port,
        mode="closed",
        connections=args.connections * args.processes,
        instances=args.instances,
        warmup_s=args.warmup,
        duration_s=args.duration,
        max_pushes=args.max_pushes,
    )


def phase_ceiling(args: argparse.Namespace, figures: Figures) -> None:
    proc, port = start_bare_server(HOST)
    try:
        window = Window(psutil.Process(proc.pid))
        result = run_load(
            _closed_spec(args, port),
            args.processes,
            at_window_start=window.open,
            at_window_end=window.close,
        )
        if result.errors:
            raise RuntimeError("; ".join(result.errors))
    finally:
        proc.terminate()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
    figures.ceiling = result.rate
    p50, p99 = _latency(result)
    # When the responder is far from a full core, the generator or other load
    # set this rate; its CPU per push says what the bare transport costs.
    per_push_us = window.server_cores / max(result.rate, 1e-9) * 1e6
    figures.ceiling_cpu_us = per_push_us
    print(
        f"{'bare protocol ceiling':<30}: {result.rate:,.0f} pushes/s p50 {_ms(p50)} p99 {_ms(p99)},"
        f" {per_push_us:.0f} µs responder CPU per push"
        f" ({window.cpu_note(result)}){_checks(result)}",
        flush=True,
    )


def phase_closed(args: argparse.Namespace, server: Kip714Server, figures: Figures) -> None:
    assert server.sampler is not None
    server.sampler.phase = "closed"
    result, window = run_window(
        _closed_spec(args, server.kafka_port), args.processes, server, args.py_spy
    )
    figures.closed_rate = result.rate
    p50, p99 = _latency(result)
    share = result.rate / figures.ceiling if figures.ceiling else float("nan")
    fsyncs = window.delta("kip714_log_fsync_seconds_count") / window.seconds
    appends = window.delta("kip714_log_appends_total") / window.seconds
    fsync_s = window.delta("kip714_log_fsync_seconds_sum")
    fsync_n = window.delta("kip714_log_fsync_seconds_count")
    fsync_avg = fsync_s / fsync_n if fsync_n else float("nan")
    requests = result.acked + result.refused
    figures.loop_us, figures.threads_us = window.per_request_us(requests)
    loop_kernel_us, threads_kernel_us = window.per_request_us(requests, kernel=True)
    print(
        f"{'kip714 closed loop':<30}: {result.rate:,.0f} acknowledged pushes/s"
        f" ({share:.0%} of ceiling) p50 {_ms(p50)} p99 {_ms(p99)},"
        f" {_fsyncs(fsyncs, fsync_avg, appends)}, log appends {appends:,.0f}/s, {_refused(result)}"
        f" ({window.cpu_note(result)}){_checks(result)}",
        flush=True,
    )
    print(
        f"{'server CPU per push':<30}: {figures.cpu_us:.1f} µs (event loop {figures.loop_us:.1f}"
        f" + other threads {figures.threads_us:.1f}; of which kernel {loop_kernel_us:.1f}"
        f" + {threads_kernel_us:.1f}) = {figures.cpu_ratio:.2f}x the bare"
        f" responder's {figures.ceiling_cpu_us:.1f} µs; load average {_load_average()}",
        flush=True,
    )


def _load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def phase_profile(args: argparse.Namespace, server: Kip714Server, figures: Figures) -> None:
    """A second closed loop with the thread-CPU profiler on; stages scaled to the first."""
    assert server.sampler is not None
    server.sampler.phase = "profile"
    result, _ = run_window(
        _closed_spec(args, server.kafka_port),
        args.processes,
        server,
        at_start=server.profile,
        at_end=server.profile,
    )
    stages = breakdown(
        server.wait_profile(),
        KAFKA_STAGES,
        requests=result.acked + result.refused,
        loop_us=figures.loop_us,
        threads_us=figures.threads_us,
        transport_us=figures.ceiling_cpu_us,
    )
    title = (
        f"Kafka PushTelemetry, quotas {'on' if args.quotas else 'off'},"
        f" load average {_load_average()}"
    )
    path = stages.write(Path(args.profile), "kafka_push_stages", title)
    print(stages.table(title), flush=True)
    print(f"stage profile written to {path} (and .json); pstats: {server.profile_to}", flush=True)


def phase_open(args: argparse.Namespace, server: Kip714Server, figures: Figures) -> None:
    assert server.sampler is not None
    server.sampler.phase = "open"
    instances = max(args.open_instances, args.connections * args.processes)
    spec = LoadSpec(
        host=HOST,
        port=server.kafka_port,
        mode="open",
        connections=args.connections * args.processes,
        instances=instances,
        rate=args.rate,
        warmup_s=args.warmup,
        duration_s=args.duration,
        max_pushes=args.max_pushes,
    )
    result, window = run_window(spec, args.processes, server)
    p50, p99 = _latency(result)
    figures.open_rate, figures.open_p99 = result.rate, p99
    fsyncs = window.delta("kip714_log_fsync_seconds_count") / window.seconds
    ordered = result.latencies()
    label = f"kip714 open loop @ {args.rate:,.0f}/s"
    print(
        f"{label:<30}: {result.rate:,.0f} acknowledged pushes/s p50 {_ms(p50)}"
        f" p99 {_ms(p99)} p99.9 {_ms(percentile(ordered, 0.999))}"
        f" max {_ms(ordered[-1] if ordered else 0)},"
        f" {fsyncs:,.0f} fsyncs/s, {_refused(result)}"
        f" ({window.cpu_note(result)}){_checks(result)}",
        flush=True,
    )


def phase_instances(args: argparse.Namespace, server: Kip714Server, figures: Figures) -> None:
    sampler = server.sampler
    assert sampler is not None
    sampler.phase = "instances"
    held: dict[str, float] = {}
    rss_held = [0]

    def holding() -> None:
        time.sleep(0.5)  # let the sampler see the settled process
        held.update(server.metrics())
        rss_held[0] = sampler.sample()

    spec = LoadSpec(
        host=HOST,
        port=server.kafka_port,
        mode="instances",
        connections=args.connections * args.processes,
        instances=args.cached_instances,
        max_pushes=args.max_pushes,
    )
    result = run_load(spec, args.processes, while_holding=holding)
    if result.errors:
        raise RuntimeError("; ".join(result.errors))
    cached = int(held.get("kip714_client_instances", 0))
    gets = sum(w.gets_ok for w in result.workers)
    figures.rss_cached = sampler.peaks.get("instances", 0)
    figures.cached = cached
    label = f"{args.cached_instances:,} cached instances"
    print(
        f"{label:<30}: {cached:,} instances in the server's cache, peak RSS"
        f" {figures.rss_cached / MIB:.0f} MiB (RSS {rss_held[0] / MIB:.0f} MiB while held);"
        f" {gets:,} GETs + {result.acked:,} pushes acknowledged in {result.window_s:.1f} s,"
        f" {_refused(result)}",
        flush=True,
    )


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before")
    parser.add_argument("--processes", type=int, default=2, help="load-generator processes")
    parser.add_argument(
        "--connections", type=int, default=200, help="connections per load-generator process"
    )
    parser.add_argument(
        "--instances",
        type=int,
        default=3_000,
        help="client instances in the closed-loop phases (each pushes at most every 100 ms)",
    )
    parser.add_argument("--rate", type=float, default=4_000.0, help="open-loop pushes/s")
    parser.add_argument(
        "--open-instances", type=int, default=1_200, help="client instances in the open loop"
    )
    parser.add_argument("--cached-instances", type=int, default=16_384)
    parser.add_argument(
        "--max-pushes", type=int, default=2_000_000, help="hard cap on pushes sent per phase"
    )
    parser.add_argument(
        "--exporters",
        choices=("none", "default"),
        default="none",
        help="none: no exporter (the acknowledgement path only); default: the built-in jsonl",
    )
    parser.add_argument(
        "--quotas",
        action="store_true",
        help="every client under a quota it never reaches (enforcement on, nothing throttled)",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="after the closed loop, a second one under a thread-CPU profile of the server:"
        " the per-stage breakdown of a push to DIR (kafka_push_stages.txt/.json, server.pstats);"
        " skips the open-loop and instances phases",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"ceiling and closed loop only (quotas as recorded), compared with {BUDGET.name}:"
        " by how much the per-push CPU ratio to the bare responder moved",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"as --check, then write this run's ratio to {BUDGET.name}",
    )
    parser.add_argument(
        "--py-spy",
        metavar="FILE",
        help="py-spy the server during the closed loop, collapsed stacks to FILE (needs py-spy)",
    )
    parser.add_argument(
        "--log",
        choices=("local", "kafka", "both"),
        default="local",
        help='the ingest log: local; kafka ([log] store = "kafka" on a broker this run starts,'
        " closed and open loops only); both: local, then kafka, compared",
    )
    parser.add_argument("--quick", action="store_true", help="short phases, for a smoke run")
    args = parser.parse_args(argv)
    if args.log != "local" and (args.check or args.record or args.profile):
        parser.error("--log kafka/both runs the closed and open loops only")
    if args.quick:
        args.duration = min(args.duration, 2.0)
        args.warmup = min(args.warmup, 0.5)
        args.cached_instances = min(args.cached_instances, 2_048)
    for name in ("duration", "processes", "connections", "instances", "rate", "max_pushes"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.duration > 600 or args.processes > 16 or args.connections > 2000:
        parser.error("bounded: --duration <= 600, --processes <= 16, --connections <= 2000")
    return args


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kip714-ack-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def check_budget(args: argparse.Namespace, figures: Figures, budget: dict[str, Any]) -> int:
    """Say by how much the per-push CPU ratio moved from the budget; 1 past its tolerance."""
    recorded = float(budget["cpu_ratio"])
    moved = figures.cpu_ratio / recorded - 1
    tolerance = float(budget.get("tolerance", 0.15))
    verdict = "within" if moved <= tolerance else "OVER"
    print(
        f"budget: per-push CPU {figures.cpu_ratio:.2f}x the bare responder against"
        f" {recorded:.2f}x committed ({budget['server_cpu_us']:.1f} µs /"
        f" {budget['bare_cpu_us']:.1f} µs at load {budget['load_average']}): {moved:+.1%},"
        f" {verdict} the +{tolerance:.0%}"
        f" tolerance; this run {figures.cpu_us:.1f} µs / {figures.ceiling_cpu_us:.1f} µs",
        flush=True,
    )
    if args.record:
        entry = {
            **budget,
            "cpu_ratio": round(figures.cpu_ratio, 2),
            "server_cpu_us": round(figures.cpu_us, 1),
            "bare_cpu_us": round(figures.ceiling_cpu_us, 1),
            "load_average": _load_average(),
        }
        others = json.loads(BUDGET.read_text())  # the other benchmarks' entries stay
        BUDGET.write_text(json.dumps({**others, "kafka_push": entry}, indent=2) + "\n")
        print(f"recorded in {BUDGET}", flush=True)
        return 0
    return 0 if moved <= tolerance else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budget: dict[str, Any] = {}
    if args.check or args.record:
        budget = json.loads(BUDGET.read_text())["kafka_push"]
        args.quotas = bool(budget["quotas"])
    payload = build_payloads(8)
    print(
        f"machine: {os.cpu_count()} cores, shared by the server and {args.processes} load processes"
        f" x {args.connections} connections; payload {METRICS_PER_PUSH} metrics,"
        f" {sum(map(len, payload)) // len(payload):,} B zstd; push interval {INTERVAL_MS} ms;"
        f" {args.warmup:g} s warm-up + {args.duration:g} s per phase;"
        f" exporters: {args.exporters}; quotas: {'every client' if args.quotas else 'none'};"
        f" push path {push_path_build()}; load average {_load_average()}",
        flush=True,
    )
    figures = Figures()
    phase_ceiling(args, figures)
    if args.log != "local":
        return kafka_modes(args, figures)
    with workdir() as path:
        profile_to = Path(args.profile).resolve() / "server.pstats" if args.profile else None
        if profile_to is not None:
            profile_to.parent.mkdir(parents=True, exist_ok=True)
            profile_to.unlink(missing_ok=True)
        server = Kip714Server(
            path, args.cached_instances, args.exporters, quotas=args.quotas, profile_to=profile_to
        )
        try:
            server.start()
            phase_closed(args, server, figures)
            if budget:
                return check_budget(args, figures, budget)
            if args.profile:
                phase_profile(args, server, figures)
                return 0
            phase_open(args, server, figures)
            phase_instances(args, server, figures)
            assert server.sampler is not None
            figures.rss_peak = server.sampler.peak
        finally:
            code = server.stop()
        if code != 0:
            print(f"kip714 serve exited with {code}", file=sys.stderr)
        if server.warnings:
            print(f"kip714 serve logged {server.warnings} warnings/errors; last lines:")
            for line in server.log_tail[-5:]:
                print(f"  {line}")
    print(f"{'peak RSS over the run':<30}: {figures.rss_peak / MIB:.0f} MiB", flush=True)
    share = figures.closed_rate / figures.ceiling if figures.ceiling else 0.0
    judged = "" if not args.quick else " (quick run: not comparable with the targets)"
    print(
        f"targets: >={TARGET_RATE:,}/s [{_verdict(figures.closed_rate >= TARGET_RATE)}],"
        f" p99<{TARGET_P99_S * 1000:.0f}ms@{args.rate:,.0f}/s"
        f" [{_verdict(figures.open_p99 < TARGET_P99_S)}],"
        f" >={TARGET_CEILING_SHARE:.0%} ceiling [{_verdict(share >= TARGET_CEILING_SHARE)}],"
        f" RSS<{TARGET_RSS // MIB}MiB with {figures.cached:,} cached"
        f" [{_verdict(figures.rss_peak < TARGET_RSS and figures.cached >= args.cached_instances)}]"
        f"{judged}",
        flush=True,
    )
    summary = {
        "ceiling": round(figures.ceiling),
        "closed": round(figures.closed_rate),
        "open": round(figures.open_rate),
        "open_p99_ms": round(figures.open_p99 * 1000, 2),
        "rss_peak_mib": round(figures.rss_peak / MIB, 1),
        "cached": figures.cached,
        "cpu_us": round(figures.cpu_us, 1),
        "cpu_ratio": round(figures.cpu_ratio, 2),
        "load_average": _load_average(),
    }
    print("json:", json.dumps(summary), flush=True)
    return 0


def kafka_modes(args: argparse.Namespace, ceiling: Figures) -> int:
    """The closed and open loops with the local log (``both``), then with the log in Kafka."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/
    from tests.kafka.kafka_dist import KafkaBroker, kafka_jars, plugin_jar  # noqa: PLC0415

    modes = ["local", "kafka"] if args.log == "both" else ["kafka"]
    results: dict[str, Figures] = {}
    with workdir() as path:
        broker = KafkaBroker(path / "broker", kafka_jars(), plugin_jar(), {}).start()
        try:
            for mode in modes:
                figures = Figures(ceiling=ceiling.ceiling, ceiling_cpu_us=ceiling.ceiling_cpu_us)
                print(f"-- ingest log: {mode}", flush=True)
                (path / mode).mkdir()
                server = Kip714Server(
                    path / mode,
                    args.cached_instances,
                    args.exporters,
                    quotas=args.quotas,
                    kafka_log=broker.bootstrap if mode == "kafka" else None,
                    broker_pid=broker.process.pid if mode == "kafka" and broker.process else None,
                )
                try:
                    server.start()
                    phase_closed(args, server, figures)
                    phase_open(args, server, figures)
                finally:
                    code = server.stop()
                if code != 0 or server.warnings:
                    print(f"kip714 serve exited with {code}, {server.warnings} warnings/errors")
                    for line in server.log_tail[-5:]:
                        print(f"  {line}")
                results[mode] = figures
        finally:
            broker.stop()
            broker.kill()
    summary = {
        mode: {
            "closed": round(f.closed_rate),
            "open": round(f.open_rate),
            "open_p99_ms": round(f.open_p99 * 1000, 2),
            "cpu_us": round(f.cpu_us, 1),
        }
        for mode, f in results.items()
    }
    if "local" in results:
        local, kafka = results["local"], results["kafka"]
        share = kafka.closed_rate / local.closed_rate if local.closed_rate else float("nan")
        print(
            f"{'kafka log / local log':<30}: {share:.0%} of the acknowledged pushes/s"
            f" (target >= 50% [{_verdict(share >= 0.5)}]); open-loop p99 {_ms(kafka.open_p99)}"
            f" (local {_ms(local.open_p99)})",
            flush=True,
        )
    print("json:", json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
