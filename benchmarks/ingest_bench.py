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
  pushes × 60, and bytes per data point on disk;
* the landing's cost per data point: its worker processes' CPU seconds
  (psutil, from the window's start until the lag is drained) divided by the
  data points landed in that span, in µs, and (when ``perf`` runs here)
  the user-space instructions they executed per data point, which a busy
  machine hardly moves; beside them the same work in this process
  (``LakeRows.batch`` + ``write``: flatten, lake rows, Parquet) for
  librdkafka-sized and SDK-sized pushes. ``--check`` runs at the rate and
  duration of ``budget.json``'s ``landing_us_per_point`` and exits 1 when
  either figure is beyond its tolerance (target: 1 µs per data point).

``--profile DIR`` has the landing's workers profile their lanes (cProfile on
the process CPU clock, turned on by ``KIP714_LANDING_PROFILE=DIR`` in the
server's environment; stats in ``DIR/landing-lane-<pid>.pstats``) and prints
where their CPU went per data point: by stage, then by function.

The server runs with ``max_file_age_s = 5``, the server's default
(``--file-age``); earlier versions of this benchmark used 10.

``--log kafka`` starts a real Kafka broker (``tests/kafka/kafka_dist.py``,
cached jars, one KRaft node on loopback) and runs the same load against
``[log] store = "kafka"``: pushes acknowledged after the cluster's
``acks=all``, the landing a member of the pushes topic's consumer group. The
log end is then the pushes the cluster acknowledged
(``kip714_log_ack_seconds``' count) and the landed position the landing's
``rows_landed`` over 60 rows a push (the host's lag there counts records
taken, not landed). ``--log both`` runs the local log first, then starts the
broker and runs Kafka, and ends with the Kafka log's acknowledged pushes/s as
a share of the local log's, both landed rates and both p99s. The broker's JVM
shares the machine's cores with the server and the load generator: its CPU
in the window is printed beside theirs, and the producer's acknowledgement
latency (``kip714_log_ack_seconds``: mean, p99 bucket) beside the clients'.
``--check`` and ``--profile`` run with the local log only.

Targets: ≥ 4,000 pushes/s (≈ 240,000 data points/s) landed with a
bounded lag, landed ≥ 95 % of acknowledged in the window, p99 of
acknowledgements under 50 ms, at least the single-process flatten limit,
≤ 15 bytes per data point, ≤ 1 µs of worker CPU per data point. The load
generator shares the 2 cores with the server; figures taken while other work
runs on the machine are noisy, and the output says how busy the machine was.

    python3 benchmarks/ingest_bench.py                 # about 1 minute
    python3 benchmarks/ingest_bench.py --quick         # smoke run
    python3 benchmarks/ingest_bench.py --rate 8000 --duration 20   # the issue's target
    python3 benchmarks/ingest_bench.py --check         # 8,000/s for 20 s, against budget.json
    python3 benchmarks/ingest_bench.py --profile /tmp/landing-profile
    python3 benchmarks/ingest_bench.py --log both --rate 2000   # local log, then the log in Kafka
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pstats
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
    from collections.abc import Callable, Iterator

#: The idle footprint is read this long after the server is ready; the issue's bounds.
IDLE_AFTER_S: Final = 10.0
IDLE_RSS_SERVER_MIB: Final = 100
IDLE_RSS_WORKER_MIB: Final = 150
HOST: Final = "127.0.0.1"
INTERVAL_MS: Final = 100
MIB: Final = 1024 * 1024
TARGET_PUSHES: Final = 4_000
TARGET_BYTES_PER_POINT: Final = 15.0
TARGET_US_PER_POINT: Final = 1.0
BUDGET: Final = Path(__file__).resolve().parent / "budget.json"
#: ``exporters.iceberg.rows.PROFILE_ENV`` (spelled out, so this benchmark also runs
#: against a checkout whose lanes cannot profile themselves, for a baseline).
PROFILE_ENV: Final = "KIP714_LANDING_PROFILE"
#: The pushes topic of ``--log kafka`` (on a broker of the run's own, created at start).
KAFKA_TOPIC: Final = "_kip714_bench"
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


# -- the landing's cost per data point ----------------------------------------------------------


def sdk_payload() -> bytes:
    """One SDK-sized export (``otlp_http_bench.sdk_sized``: counters, histograms, gauges)."""
    from otlp_http_bench import sdk_sized  # noqa: PLC0415  (the OpenTelemetry SDK loads only here)

    return sdk_sized()


def lane_us_per_point(payloads: list[bytes], pushes: int = 2048, repeat: int = 3) -> float:
    """CPU µs per data point of a lane's work in this process: ``LakeRows.batch`` + ``write``.

    What a landing worker does with a generation (flatten, lake rows, Parquet
    encode into a local file), handed over 64 pushes at a time as the
    exporter does; best of ``repeat``. ``payloads`` are uncompressed OTLP.
    """
    batch = [
        _with_payload(push, payloads[i % len(payloads)])
        for i, (_, push) in enumerate(_pushes(payloads, pushes))
    ]
    best = float("inf")
    for _ in range(repeat + 1):  # the first run warms up
        with workdir() as root:
            lane = LakeRows(LaneConfig(0, "bench", {METRICS_TABLE: f"file://{root}"}, {}, "b"))
            started = time.process_time()
            for first in range(0, len(batch), 64):
                lane.batch(batch[first : first + 64], 0, None)
            files, _ = lane.write(0, len(batch) - 1)
            spent = time.process_time() - started
            rows = sum(f.rows for f in files)
        best = min(best, spent / max(rows, 1) * 1e6)
    return best


@dataclass(slots=True)
class WorkerCost:
    """The landing workers' CPU from the window's start until the lag is drained."""

    started_cpu: float = 0.0
    started_landed: float = 0.0
    cpu: float = 0.0
    points: float = 0.0
    instructions: float = float("nan")
    _perf: subprocess.Popen[bytes] | None = None
    _perf_out: Path | None = None

    @property
    def us_per_point(self) -> float:
        return self.cpu / self.points * 1e6 if self.points else float("nan")

    @property
    def instructions_per_point(self) -> float:
        return self.instructions / self.points if self.points else float("nan")

    def count_instructions(self, pids: list[int], out: Path) -> None:
        """Count the workers' user-space instructions with ``perf stat`` (when perf runs here).

        CPU time on a shared 2-core machine moves with what else runs (caches,
        frequency); instructions hardly do, so they compare two checkouts
        measured minutes apart.
        """
        if not pids or shutil.which("perf") is None:
            return
        command = ["perf", "stat", "-e", "instructions:u", "-x", ",", "-o", str(out),
                   "-p", ",".join(map(str, pids))]  # fmt: skip
        self._perf_out = out
        self._perf = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop_counting(self) -> None:
        if self._perf is None or self._perf_out is None:
            return
        self._perf.send_signal(signal.SIGINT)
        try:
            self._perf.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._perf.kill()
            self._perf.wait(timeout=5)
            return
        with contextlib.suppress(OSError, ValueError):
            for line in self._perf_out.read_text().splitlines():
                if "instructions" in line:
                    self.instructions = float(line.split(",")[0])


def enable_profile(directory: Path) -> None:
    """Have the server's landing lanes profile themselves into ``directory``.

    ``exporters.iceberg.rows.LakeRows`` reads ``PROFILE_ENV`` when it is
    built (in the worker, which inherits the server's environment, which
    inherits this process's) and writes its cProfile stats (process CPU
    clock) after every generation it writes.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("landing-lane-*.pstats"):
        old.unlink()
    os.environ[PROFILE_ENV] = str(directory)


def print_profile(directory: Path, points: float, top: int = 25) -> None:
    """Where the lanes' CPU went, per data point landed: by stage, then by own time."""
    files = sorted(directory.glob("landing-lane-*.pstats"))
    if not files:
        print(f"profile: no lane wrote a profile into {directory}", flush=True)
        return
    stats = pstats.Stats(*map(str, files))
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(tottime for _, _, tottime, _, _ in raw.values())
    per_point = 1e6 / max(points, 1)
    code = next((Path(k[0]).parents[2] for k in raw if k[0].endswith("iceberg/rows.py")), "?")
    print(
        f"profile of the landing lanes ({len(files)} worker(s), cProfile on the process CPU"
        f" clock, the whole run; {directory}; the lanes ran the code in {code}):"
        f" {total:.1f} s, {total * per_point:.2f} µs per data point landed"
        f" (the profiler's overhead included)",
        flush=True,
    )
    for label, where in _STAGES:
        spent = sum(cum for key, (_, _, _, cum, _) in raw.items() if where(key))
        print(f"  {spent * per_point:6.3f} µs/dp  {label}")
    print("  by own time:")
    ranked = sorted(raw.items(), key=lambda item: -item[1][2])[:top]
    for (path, line, name), (_, calls, tottime, _, _) in ranked:
        short = "/".join(Path(path).parts[-2:])
        print(f"  {tottime * per_point:6.3f} µs/dp  {calls:>8,} calls  {short}:{line}({name})")


def _is(path_part: str, name: str) -> Callable[[tuple[str, int, str]], bool]:
    return lambda key: key[0].endswith(path_part) and key[2] == name


#: Stages of a lane's work, as the profiled functions that do them (cumulative time).
_STAGES: Final = (
    ("flatten (ptars decode + Arrow kernels)", _is("landing/flatten.py", "flatten_to_table")),
    ("  of which ptars decode", lambda key: "list_to_record_batch" in key[2]),
    ("  of which reference flattener", _is("landing/flatten.py", "reference_table")),
    ("lake rows (to_lake_rows)", _is("iceberg/schema.py", "to_lake_rows")),
    ("Parquet encode (write_table)", lambda key: key[2] == "write_table"),
    ("closing files (ParquetWriter.close)", lambda key: "parquet" in key[0] and key[2] == "close"),
)


def landing_budget() -> dict[str, Any]:
    """``budget.json``'s ``landing_us_per_point`` entry."""
    budget: dict[str, Any] = json.loads(BUDGET.read_text())["landing_us_per_point"]
    return budget


def check_budget(budget: dict[str, Any], cost: WorkerCost) -> int:
    """Compare the workers' cost per data point with ``budget.json``; 1 beyond a tolerance.

    CPU time is the budget; the instructions (when perf counted them) are
    checked too, with their own, tighter tolerance: on a shared machine they
    move far less than CPU time does.
    """
    recorded, tolerance = float(budget["us_per_point"]), float(budget["tolerance"])
    moved = cost.us_per_point / recorded - 1
    over = not moved <= tolerance
    print(
        f"budget: landing {cost.us_per_point:.2f} µs per data point against {recorded:.2f}"
        f" committed (at {budget['rate']:,} pushes/s offered, load {budget['load_average']}):"
        f" {moved:+.1%}, {'OVER' if over else 'within'} the +{tolerance:.0%} tolerance",
        flush=True,
    )
    if "instructions_per_point" in budget and cost.instructions == cost.instructions:
        counted = float(budget["instructions_per_point"])
        allowed = float(budget["instructions_tolerance"])
        drift = cost.instructions_per_point / counted - 1
        print(
            f"budget: {cost.instructions_per_point:,.0f} instructions per data point against"
            f" {counted:,.0f}: {drift:+.1%}, {'OVER' if drift > allowed else 'within'} the"
            f" +{allowed:.0%} tolerance",
            flush=True,
        )
        over = over or drift > allowed
    return 1 if over else 0


# -- the server under test ----------------------------------------------------------------------


def server_config(landing: Path, args: argparse.Namespace, kafka_log: str | None = None) -> str:
    """``kafka_log``: the bootstrap servers of a ``[log] store = "kafka"`` (else the local log)."""
    options = [
        f"max_file_age_s = {args.file_age}",
        f"max_pending_rows = {args.max_rows}",
        f"workers = {args.workers}",
    ]
    log = (
        ['store = "kafka"', f'bootstrap_servers = "{kafka_log}"', f'topic = "{KAFKA_TOPIC}"']
        if kafka_log is not None
        else [f"max_bytes = {8 * 1024 * MIB}"]
    )
    return "\n".join(
        [
            "[subscriptions.bench]",
            'metrics = ["*"]',
            f'"interval.ms" = {INTERVAL_MS}',
            "[telemetry]",
            "instance_cache_size = 16384",
            "[log]",
            *log,
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
    #: The bootstrap servers of the pushes topic (``[log] store = "kafka"``); None: the local log.
    kafka_log: str | None = None
    #: The process id of the run's own broker (``--log kafka``), for its CPU in the window.
    broker_pid: int | None = None
    proc: subprocess.Popen[str] | None = None
    http_port: int = 0
    kafka_port: int = 0
    tail: list[str] = field(default_factory=list)
    rss_server: int = 0
    rss_workers: int = 0
    #: ``cluster_acks()`` once the landing drained (``--log kafka``).
    acks: str = ""
    _lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        config = self.workdir / "kip714.toml"
        config.write_text(server_config(self.workdir / "landing", self.args, self.kafka_log))
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

    def broker_cpu_s(self) -> float:
        """CPU seconds so far of the run's own Kafka broker (0 without one)."""
        if self.broker_pid is None:
            return 0.0
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(self.broker_pid).cpu_times()
            return float(times.user + times.system)
        return 0.0

    def landed(self) -> tuple[float, float]:
        """(log end, landed position) of the landing, in pushes.

        The local log: its end offset, less the landing's lag (the host's lag is
        from the landing's committed position). The log in Kafka: the host's
        lag there counts records *taken* from the topic, not landed, so the end
        is the pushes the cluster acknowledged (``kip714_log_ack_seconds``'
        count) and the landed position the rows in committed snapshots
        (``rows_landed``) over the 60 rows of each push; one node, one fresh
        topic, so both start at 0.
        """
        values = self.metrics()
        if self.kafka_log is not None:
            rows = values.get('kip714_exporter_stat{exporter="landing",stat="rows_landed"}', 0.0)
            return values.get("kip714_log_ack_seconds_count", 0.0), rows / METRICS_PER_PUSH
        end = values.get("kip714_log_end_offset", 0.0)
        return end, end - values.get('kip714_exporter_lag_pushes{exporter="landing"}', 0.0)

    def cluster_acks(self) -> str:
        """The producer's acknowledgement latency so far (``--log kafka``): mean and p99 bucket.

        From ``kip714_log_ack_seconds``: producing a push until the cluster's
        ``acks=all``, without the wait in the server before it (the clients'
        p99 has both).
        """
        values = self.metrics()
        count = values.get("kip714_log_ack_seconds_count", 0.0)
        if not count:
            return "no acknowledgement counted"
        mean = values.get("kip714_log_ack_seconds_sum", 0.0) / count
        bounds = sorted(
            (float(key.split('"')[1]), value)
            for key, value in values.items()
            if key.startswith("kip714_log_ack_seconds_bucket{")
        )
        p99 = next((bound for bound, seen in bounds if seen >= 0.99 * count), float("inf"))
        return f"mean {mean * 1000:.1f} ms, p99 <= {p99 * 1000:g} ms (its bucket) over {count:,.0f}"

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
    broker_cpu: list[float] = field(default_factory=list)

    def start(self) -> None:
        self.busy.append(_busy_cpu_s())
        self.cpu.append(self.server.cpu_s())
        self.broker_cpu.append(self.server.broker_cpu_s())
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
        self.broker_cpu.append(self.server.broker_cpu_s())
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
    parser.add_argument(
        "--file-age", type=float, default=5.0, help="max_file_age_s (the server's default, 5)"
    )
    parser.add_argument("--max-rows", type=int, default=2_000_000, help="max_pending_rows")
    parser.add_argument("--limit-seconds", type=float, default=3.0)
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="profile the landing workers' lanes (cProfile; stats to DIR) and print a summary",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"run at {BUDGET.name}'s rate and duration and compare the landing's µs per data"
        " point (landing_us_per_point) and the idle RSS (idle_rss_mib) with it; exit 1 when"
        " either is beyond its tolerance",
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--log",
        choices=("local", "kafka", "both"),
        default="local",
        help='the ingest log: local; kafka ([log] store = "kafka" on a broker this run starts,'
        " the landing a member of the pushes topic's consumer group); both: local, then kafka,"
        " compared",
    )
    args = parser.parse_args(argv)
    if args.log != "local" and (args.check or args.profile):
        parser.error("--check and --profile run with --log local only")
    if args.check:  # the budget's figure holds for its own load
        budget = landing_budget()
        args.rate, args.duration = float(budget["rate"]), float(budget["duration_s"])
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
    server: Server, sampler: Sampler, args: argparse.Namespace, cost: WorkerCost
) -> tuple[PhaseResult, int, float, int | None]:
    """Offer the load, then wait for the landing to drain; (result, acked, drain s, exit code).

    ``cost`` gets the workers' CPU and the data points landed from the
    window's start until the lag is drained; with ``--profile`` the workers
    profile themselves (``enable_profile``).
    """

    def window_start() -> None:
        sampler.start()
        cost.started_cpu = server.cpu_s()[1]
        cost.started_landed = sampler.samples[0][2] if sampler.samples else server.landed()[1]
        assert server.proc is not None
        with contextlib.suppress(psutil.Error):
            workers = psutil.Process(server.proc.pid).children(recursive=True)
            cost.count_instructions([w.pid for w in workers], server.workdir / "perf.txt")

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
            spec, args.processes, at_window_start=window_start, at_window_end=sampler.stop
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
        cost.cpu = server.cpu_s()[1] - cost.started_cpu
        cost.stop_counting()
        cost.points = (landed - cost.started_landed) * METRICS_PER_PUSH
        if server.kafka_log is not None:
            server.acks = server.cluster_acks()
        code = server.stop()
    except Exception:
        print("kip714 serve's last lines:", *server.tail[-10:], sep="\n  ", file=sys.stderr)
        raise
    finally:
        server.stop()
    return result, acked, drained_s, code


@dataclass(slots=True)
class SingleProcess:
    """The figures measured in this process, once per run (both modes print them)."""

    reference: float  # pushes/s, the reference flattener
    landing_path: float  # pushes/s, the landing's flattener
    realistic_size: float  # bytes per data point, 1,000 distinct pushes
    lane_kafka: float  # µs per data point, librdkafka-sized pushes
    lane_sdk: float  # µs per data point, SDK-sized pushes


@dataclass(slots=True)
class ModeFigures:
    """What one server run (one ingest log) measured, for ``--log both``'s comparison."""

    acked_rate: float
    landed_rate: float
    p99_s: float
    all_landed: bool
    cost: WorkerCost
    code: int | None


def run_server(
    args: argparse.Namespace,
    single: SingleProcess,
    kafka_log: str | None = None,
    broker_pid: int | None = None,
) -> ModeFigures:
    """One ``kip714 serve`` under the load, its landing drained; prints its figures.

    ``kafka_log``: the bootstrap servers of the pushes topic (``[log] store =
    "kafka"``); None: the local log.
    """
    reference, landing_path = single.reference, single.landing_path
    realistic_size, lane_kafka, lane_sdk = single.realistic_size, single.lane_kafka, single.lane_sdk
    with workdir() as path:
        server = Server(path, args, kafka_log, broker_pid)
        sampler = Sampler(server)
        cost = WorkerCost()
        result, acked, drained_s, code = load_phase(server, sampler, args, cost)
        samples = sampler.samples
        (t0, _, landed0), (t1, _, landed1) = samples[0], samples[-1]
        window = max(t1 - t0, 1e-9)
        landed_rate = (landed1 - landed0) / window
        lags = [end - landed for _, end, landed in samples]
        machine = (sampler.busy[1] - sampler.busy[0]) / window if len(sampler.busy) == 2 else 0.0
        (server0, workers0), (server1, workers1) = sampler.cpu[0], sampler.cpu[-1]
        server_cores, worker_cores = (server1 - server0) / window, (workers1 - workers0) / window
        broker_cores = (sampler.broker_cpu[-1] - sampler.broker_cpu[0]) / window
        broker = f", the Kafka broker {broker_cores:.2f}" if broker_pid is not None else ""
        generation = args.max_rows * args.workers / METRICS_PER_PUSH
        bounded = max(lags) <= generation + 2 * args.rate and drained_s < 60
        files, rows, size = landed_files(path / "landing")
        ordered = result.latencies()
        p99 = percentile(ordered, 0.99)
        print(
            f"{'acknowledged':<30}: {result.rate:,.0f} pushes/s, p50"
            f" {percentile(ordered, 0.5) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms,"
            f" refused {result.refused}"
            f"{f'; the cluster acknowledged the producer: {server.acks}' if server.acks else ''}",
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
            f" landing workers {worker_cores:.2f}{broker})",
            flush=True,
        )
        print(
            f"{'on disk':<30}: {files} files, {rows:,} rows for {acked:,} acknowledged pushes"
            f" (x{METRICS_PER_PUSH} = {acked * METRICS_PER_PUSH:,}),"
            f" {size / max(rows, 1):.2f} bytes/data point (the generator repeats 8 payloads);"
            f" {realistic_size:.2f} bytes/data point for 1,000 distinct pushes; server exit {code}",
            flush=True,
        )
        print(
            f"{'landing cost per data point':<30}: {cost.us_per_point:.2f} µs of worker CPU"
            f" ({cost.cpu:.1f} s for {cost.points:,.0f} data points landed from the window's start"
            f" until drained; {cost.instructions_per_point:,.0f} instructions, perf stat);"
            f" in this process (LakeRows.batch + write, 2,048 pushes):"
            f" librdkafka-sized {lane_kafka:.2f} µs, SDK-sized {lane_sdk:.2f} µs;"
            f" flatten limit above {1e6 / (landing_path * METRICS_PER_PUSH):.2f} µs",
            flush=True,
        )
        limit = landing_path if fast.available() else reference
        print(
            f"targets: >={TARGET_PUSHES:,} pushes/s landed [{_ok(landed_rate >= TARGET_PUSHES)}],"
            f" landed >= 95% of acknowledged in the window"
            f" ({landed_rate / max(result.rate, 1):.0%})"
            f" [{_ok(landed_rate >= 0.95 * result.rate)}], p99 < 50 ms [{_ok(p99 < 0.050)}],"
            f" >= single-process reference flatten limit {reference:,.0f}/s"
            f" [{_ok(landed_rate >= reference)}], lag bounded"
            f" (<= one generation of {generation:,.0f} pushes + 2 s of load) [{_ok(bounded)}],"
            f" <={TARGET_BYTES_PER_POINT:g} B/dp"
            f" [{_ok(realistic_size <= TARGET_BYTES_PER_POINT)}],"
            f" every acknowledged data point landed [{_ok(rows == acked * METRICS_PER_PUSH)}],"
            f" <={TARGET_US_PER_POINT:g} µs/dp in the workers"
            f" [{_ok(cost.us_per_point <= TARGET_US_PER_POINT)}]"
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
                    "landing_us_per_point": round(cost.us_per_point, 3),
                    "landing_instructions_per_point": (
                        round(cost.instructions_per_point)
                        if cost.instructions_per_point == cost.instructions_per_point  # not NaN
                        else None
                    ),
                    "lane_us_per_point_librdkafka": round(lane_kafka, 3),
                    "lane_us_per_point_sdk": round(lane_sdk, 3),
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                    **(
                        {"log": "kafka", "broker_cores": round(broker_cores, 2)}
                        if kafka_log is not None
                        else {}
                    ),
                }
            ),
            flush=True,
        )
        if args.profile:
            print_profile(Path(args.profile).resolve(), cost.points)
        return ModeFigures(
            acked_rate=result.rate,
            landed_rate=landed_rate,
            p99_s=p99,
            all_landed=rows == acked * METRICS_PER_PUSH,
            cost=cost,
            code=code,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    payloads = build_payloads(8)
    print(
        f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} before the run;"
        f" payload {METRICS_PER_PUSH} metrics, {sum(map(len, payloads)) // len(payloads):,} B zstd;"
        f" offered {args.rate:,.0f} pushes/s for {args.duration:g} s (+{args.warmup:g} s warm-up);"
        f" landing workers {args.workers}; vectorised flattener: {fast.available()}"
        f"{'' if args.log == 'local' else f'; ingest log: {args.log}'}",
        flush=True,
    )
    distinct = distinct_payloads(1000)
    reference, landing_path = flatten_limit(distinct, args.limit_seconds)
    realistic_size = bytes_per_point(distinct)
    decompressor = zstandard.ZstdDecompressor()
    plain = [decompressor.decompress(p, max_output_size=1 << 24) for p in distinct]
    lane_kafka, lane_sdk = lane_us_per_point(plain), lane_us_per_point([sdk_payload()])
    print(
        f"{'single-process flatten limit':<30}: reference (otlp_rows) {reference:,.0f} pushes/s"
        f" = {reference * METRICS_PER_PUSH:,.0f} data points/s; landing path (to Arrow)"
        f" {landing_path:,.0f} pushes/s = {landing_path * METRICS_PER_PUSH:,.0f} data points/s",
        flush=True,
    )
    single = SingleProcess(reference, landing_path, realistic_size, lane_kafka, lane_sdk)
    if args.profile:
        enable_profile(Path(args.profile).resolve())
    if args.log == "local":
        local = run_server(args, single)
        if args.check:
            over_rss = check_idle_rss(args.idle_rss)
            return max(over_rss, check_budget(landing_budget(), local.cost))
        return 0
    return kafka_modes(args, single)


def kafka_modes(args: argparse.Namespace, single: SingleProcess) -> int:
    """``--log kafka``, or ``both``: the local log first, then the log in Kafka, compared.

    The broker (``tests/kafka/kafka_dist.py``, cached jars, one KRaft node on
    loopback) starts after the local run, so that run shares the machine with
    no idle JVM; it shares the 2 cores with the server and the load generator
    in the Kafka run.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/
    from tests.kafka.kafka_dist import KafkaBroker, kafka_jars, plugin_jar  # noqa: PLC0415

    results: dict[str, ModeFigures] = {}
    if args.log == "both":
        print("-- ingest log: local", flush=True)
        results["local"] = run_server(args, single)
    print("-- ingest log: kafka", flush=True)
    with workdir() as path:
        broker = KafkaBroker(path / "broker", kafka_jars(), plugin_jar(), {}).start()
        try:
            assert broker.process is not None
            results["kafka"] = run_server(args, single, broker.bootstrap, broker.process.pid)
        finally:
            broker.stop()
            broker.kill()
    kafka = results["kafka"]
    if "local" in results:
        local = results["local"]
        share = kafka.acked_rate / local.acked_rate if local.acked_rate else float("nan")
        print(
            f"{'kafka log / local log':<30}: {share:.0%} of the acknowledged pushes/s"
            f" ({kafka.acked_rate:,.0f} against {local.acked_rate:,.0f}, {args.rate:,.0f} offered;"
            f" target >= 50% [{_ok(share >= 0.5)}]); landed {kafka.landed_rate:,.0f} pushes/s"
            f" (local {local.landed_rate:,.0f}); p99 {kafka.p99_s * 1000:.1f} ms"
            f" (local {local.p99_s * 1000:.1f} ms); every acknowledged data point landed:"
            f" kafka [{_ok(kafka.all_landed)}], local [{_ok(local.all_landed)}]",
            flush=True,
        )
        print(
            "json:",
            json.dumps(
                {
                    mode: {
                        "acked_rate": round(f.acked_rate),
                        "landed_pushes_s": round(f.landed_rate),
                        "p99_ms": round(f.p99_s * 1000, 2),
                        "all_landed": f.all_landed,
                        "landing_us_per_point": round(f.cost.us_per_point, 3),
                    }
                    for mode, f in results.items()
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
