"""A fleet of ``kip714 serve`` nodes landing into one Iceberg table: one committer against many.

Issue 40. N nodes (processes on this machine) share one Kafka broker (the
pushes topic, ``[log] store = "kafka"``), one PostgreSQL catalog and one
``file://`` warehouse; each runs its landing with ``workers = 1``. A fixed
load of ``--rate`` pushes/s in total (2,000 by default: ``_loadgen``'s
librdkafka-shaped 60-metric pushes over the Kafka protocol, open loop, the
connections spread evenly over the nodes) is offered to N = 1, 2, 4, 8
nodes, in both commit modes:

* **committer** (``fleet_commits = true``, the default with the log in
  Kafka): the nodes publish their file sets on ``<pushes topic>_control``
  and the one committer adds them in one snapshot per ``commit_interval_s``;
* **per-node** (``fleet_commits = false``): every node commits its own
  snapshots, one per ``max_file_age_s``, racing the others for the table's
  metadata pointer.

Each (mode, N) point gets a topic and a lake namespace of its own (so a
table of its own), fresh nodes, a warm-up, then the measured window.
Printed per point:

* acknowledged pushes/s in the window (and refusals);
* landed == acknowledged: once the load stopped and the table caught up (a
  bounded drain), the table's rows are read back (pyarrow, file by file):
  each push is in it once, by ``(log_partition, push_offset)``, with its 60
  data points, and every push acknowledged over the whole run is there;
* table commits/s: the snapshots whose timestamp falls in the window (the
  table's metadata);
* commit latency p99: the nodes' ``/metrics`` histograms, their bucket
  deltas over the window summed over the nodes
  (``kip714_landing_fleet_commit_seconds`` for the committer,
  ``kip714_landing_commit_seconds`` per node), the quantile interpolated
  within its bucket as Prometheus's ``histogram_quantile`` does; the mean
  (sum / count) is exact;
* end-to-end lag p99: per row received in the window, the timestamp of the
  snapshot that added its data file (``table.inspect.entries()``) minus the
  row's ``received_time``: push → readable in a committed snapshot (the
  snapshot's timestamp is taken when pyiceberg builds it, just before the
  catalog's commit, so the commit's own time is not in it);
* the table's ``metadata.json`` growth per snapshot (a least-squares slope
  over every metadata file the point's table wrote).

The last line, ``targets:``, judges the committer mode only (the per-node
figures beside it are not judged): table commits/s <= 1 per
``commit_interval_s`` at every N, landed == acknowledged at every N, lag p99
<= 2 x ``commit_interval_s`` + 2 s; the exit status is 1 when one is missed.
Everything runs on this machine's cores, load generator, broker, catalog
and nodes together; each point prints the load average.

    python3 benchmarks/fleet_bench.py           # N = 1, 2, 4, 8, both modes; about 11 minutes
    python3 benchmarks/fleet_bench.py --quick   # N = 1, 2, short windows, for development
    python3 benchmarks/fleet_bench.py --nodes 4 --modes committer --duration 60

With no arguments it is self-contained: it starts its own Kafka broker
(``tests/kafka/kafka_dist.py``, jars cached under ``~/.cache/kip714``) and
its own PostgreSQL (``tests/postgres/server.py``, Debian's server binaries),
as the tests do, and removes them at the end.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import math
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
from typing import IO, TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.sql import SqlCatalog

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/

from _loadgen import METRICS_PER_PUSH, LoadSpec, PhaseResult, percentile, run_load, scrape_metrics

from tests.kafka.kafka_dist import KafkaBroker, kafka_jars
from tests.postgres.server import postgres

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from pyiceberg.table import Table

HOST: Final = "127.0.0.1"
MODES: Final = ("committer", "per-node")
NODE_COUNTS: Final = (1, 2, 4, 8)
QUICK_NODE_COUNTS: Final = (1, 2)
#: The landing's defaults (``exporters/iceberg/exporter.py`` DEFAULTS), stated in the config.
COMMIT_INTERVAL_S: Final = 5.0
FILE_AGE_S: Final = 5.0
PUSH_INTERVAL_MS: Final = 100
#: The committer's lag target: two intervals (a generation's age, then the commit's) + 2 s.
LAG_TARGET_S: Final = 2 * COMMIT_INTERVAL_S + 2.0
#: Bounds on the parts of a point that wait for something else.
NODE_START_S: Final = 120.0
SETTLE_S: Final = 90.0
DRAIN_S: Final = 6 * COMMIT_INTERVAL_S + 30.0
NODE_STOP_S: Final = 30.0
_SERVING: Final = re.compile(r"kip714 serving: kafka=(\S+):(\d+) .*?http=(\S+):(\d+)")
_LE: Final = re.compile(r'le="([^"]+)"')

NODE_CONFIG: Final = """\
[subscriptions.bench]
metrics = ["*"]
"interval.ms" = {push_interval_ms}

[server]
node_id = "{node}"

[lake]
catalog = {{ type = "sql", uri = "{uri}" }}
warehouse = "{warehouse}"
namespace = "{namespace}"

[exporters.landing.options]
workers = 1
max_file_age_s = {file_age_s}
commit_interval_s = {commit_interval_s}
fleet_commits = {fleet_commits}

[log]
store = "kafka"
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
startup_timeout_s = 60
"""


# -- the nodes -----------------------------------------------------------------------------------


class Node:
    """``kip714 serve`` as a subprocess: started, scraped, and always stopped."""

    def __init__(self, root: Path, name: str, config: str) -> None:
        self.name = name
        root.mkdir(parents=True, exist_ok=True)
        self.config = root / f"{name}.toml"
        self.config.write_text(config)
        self.data_dir = root / name
        self.proc: subprocess.Popen[str] | None = None
        self.kafka_port = 0
        self.http_port = 0
        self.log_tail: list[str] = []
        self.warnings = 0
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._drainer: threading.Thread | None = None

    def start(self) -> None:
        command = [
            sys.executable, "-m", "telemetry", "serve",
            "--kafka-listen", f"{HOST}:0", "--http-listen", f"{HOST}:0",
            "--data-dir", str(self.data_dir), "--config", str(self.config),
            "--log-format", "json",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stderr is not None
        self._drainer = threading.Thread(
            target=self._drain, args=(self.proc.stderr,), name=f"{self.name}-stderr", daemon=True
        )
        self._drainer.start()

    def wait_serving(self, deadline: float) -> None:
        assert self.proc is not None
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{self.name}: kip714 serve not serving in time") from None
            if line is None:
                tail = "\n".join(self.log_tail[-20:])
                raise RuntimeError(
                    f"{self.name}: kip714 serve exited ({self.proc.wait()}):\n{tail}"
                )
            match = _SERVING.search(line)
            if match:
                self.kafka_port, self.http_port = int(match[2]), int(match[4])
                return

    def _drain(self, stream: IO[str]) -> None:
        serving = False
        for line in stream:
            self.log_tail = [*self.log_tail[-49:], line.rstrip()]
            if '"level": "warning"' in line or '"level": "error"' in line:
                self.warnings += 1
            if not serving:
                self._lines.put(line)
                serving = _SERVING.search(line) is not None
        self._lines.put(None)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metrics(self) -> dict[str, float]:
        """``/metrics``; empty when the node does not answer (it died: the point says so)."""
        if not self.alive():
            return {}
        try:
            return scrape_metrics(HOST, self.http_port)
        except OSError:
            return {}

    def terminate(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, deadline: float) -> int | None:
        if self.proc is None:
            return None
        try:
            self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self._drainer is not None:
            self._drainer.join(timeout=5)
        return self.proc.returncode


@contextlib.contextmanager
def fleet(nodes: list[Node]) -> Iterator[list[Node]]:
    """Start the first node, then the others at once; stop them all (SIGTERM, then SIGKILL).

    The first node creates the table before it serves; the others start once it does, as two
    nodes creating one table at the same moment can fail (the loser exits 2 with pyiceberg's
    ``CommitFailedException: Table already exists``: ``exporters/iceberg/lake.py``
    ``open_table`` catches only ``TableAlreadyExistsError``).
    """
    try:
        deadline = time.monotonic() + NODE_START_S
        nodes[0].start()
        nodes[0].wait_serving(deadline)
        for node in nodes[1:]:
            node.start()
        for node in nodes[1:]:
            node.wait_serving(deadline)
        yield nodes
    finally:
        for node in nodes:
            node.terminate()
        deadline = time.monotonic() + NODE_STOP_S
        codes = {node.name: node.wait_stopped(deadline) for node in nodes}
        bad = {name: code for name, code in codes.items() if code not in {0, None}}
        if bad:
            print(f"    nodes exited with {bad}", flush=True)


# -- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lake:
    uri: str
    warehouse: str  # a file:// URI

    @contextlib.contextmanager
    def catalog(self) -> Iterator[SqlCatalog]:
        """The catalog, its connections closed afterwards (each load opens a pool)."""
        catalog = load_catalog("kip714", type="sql", uri=self.uri, warehouse=self.warehouse)
        assert isinstance(catalog, SqlCatalog)
        try:
            yield catalog
        finally:
            catalog.engine.dispose()

    def total_records(self, namespace: str) -> int:
        """Rows in the table's current snapshot, from its summary (cheap: no data read)."""
        with self.catalog() as catalog:
            if not catalog.table_exists((namespace, "metrics")):
                return 0
            snapshot = catalog.load_table((namespace, "metrics")).current_snapshot()
        if snapshot is None or snapshot.summary is None:
            return 0
        return int(snapshot.summary.additional_properties.get("total-records", 0))


@dataclass(slots=True)
class TableFigures:
    snapshots: int = 0
    fleet_snapshots: int = 0  # carrying kip714.control.offset: the committer's
    in_window: int = 0
    rows: int = 0
    pushes: int = 0  # distinct (log_partition, push_offset)
    short_pushes: int = 0  # pushes with fewer or more rows than METRICS_PER_PUSH
    lag_p50_s: float = float("nan")
    lag_p99_s: float = float("nan")
    lag_max_s: float = float("nan")
    lag_rows: int = 0
    metadata_files: int = 0
    metadata_bytes_last: int = 0
    metadata_bytes_per_snapshot: float = float("nan")
    #: The newest snapshot's ``kip714.kafka.offsets`` (every partition's next offset): bytes, and
    #: partitions; its manifest list: bytes, and manifests (one per fast append).
    offsets_bytes: int = 0
    offsets_partitions: int = 0
    manifest_list_bytes: int = 0
    manifests: int = 0


def read_table(lake: Lake, namespace: str, window: tuple[float, float]) -> TableFigures:
    """Snapshots, rows by push, and each row's lag to the snapshot that added its file."""
    figures = TableFigures()
    with lake.catalog() as catalog:
        if not catalog.table_exists((namespace, "metrics")):
            return figures
        table = catalog.load_table((namespace, "metrics"))
        snapshots = table.metadata.snapshots
        start_ms, end_ms = window[0] * 1000, window[1] * 1000
        figures.snapshots = len(snapshots)
        figures.fleet_snapshots = sum(
            1
            for s in snapshots
            if s.summary is not None and "kip714.control.offset" in s.summary.additional_properties
        )
        figures.in_window = sum(1 for s in snapshots if start_ms <= s.timestamp_ms < end_ms)
        added_at = {s.snapshot_id: s.timestamp_ms for s in snapshots}
        entries = table.inspect.entries().select(["status", "snapshot_id", "data_file"])
        _metadata_growth(table, figures)
        _newest_snapshot(table, figures)
    keys: list[pa.Array] = []
    lags: list[pa.Array] = []
    window_us = (int(window[0] * 1e6), int(window[1] * 1e6))
    for entry in entries.to_pylist():
        if entry["status"] == 2:  # DELETED: not in the table
            continue
        path = str(entry["data_file"]["file_path"]).removeprefix("file://")
        data = pq.read_table(path, columns=["received_time", "log_partition", "push_offset"])
        figures.rows += data.num_rows
        key = pc.add(
            pc.multiply(pc.cast(data["log_partition"], pa.int64()), 1 << 40),
            pc.cast(data["push_offset"], pa.int64()),
        )
        keys.append(key.combine_chunks() if isinstance(key, pa.ChunkedArray) else key)
        received_us = pc.cast(pc.cast(data["received_time"], pa.timestamp("us")), pa.int64())
        in_window = pc.and_(
            pc.greater_equal(received_us, window_us[0]), pc.less(received_us, window_us[1])
        )
        chosen = pc.filter(received_us, in_window)
        committed_us = added_at[entry["snapshot_id"]] * 1000
        lag = pc.divide(pc.cast(pc.subtract(committed_us, chosen), pa.float64()), 1e6)
        lags.append(lag.combine_chunks() if isinstance(lag, pa.ChunkedArray) else lag)
    if keys:
        counts = pc.value_counts(pa.chunked_array(keys)).flatten()[1]
        figures.pushes = len(counts)
        figures.short_pushes = int(pc.sum(pc.not_equal(counts, METRICS_PER_PUSH)).as_py() or 0)
    merged = (
        pa.chunked_array(lags, type=pa.float64()) if lags else pa.chunked_array([], pa.float64())
    )
    figures.lag_rows = len(merged)
    if figures.lag_rows:
        p50, p99 = pc.quantile(merged, q=[0.5, 0.99]).to_pylist()
        figures.lag_p50_s, figures.lag_p99_s = float(p50), float(p99)
        figures.lag_max_s = float(pc.max(merged).as_py())
    return figures


def _newest_snapshot(table: Table, figures: TableFigures) -> None:
    snapshot = table.current_snapshot()
    if snapshot is None:
        return
    if snapshot.summary is not None:
        offsets = snapshot.summary.additional_properties.get("kip714.kafka.offsets", "")
        figures.offsets_bytes = len(offsets.encode())
        with contextlib.suppress(ValueError, TypeError):
            figures.offsets_partitions = len(json.loads(offsets))
    with contextlib.suppress(OSError):
        figures.manifest_list_bytes = (
            Path(snapshot.manifest_list.removeprefix("file://")).stat().st_size
        )
    figures.manifests = len(snapshot.manifests(table.io))


def _metadata_growth(table: Table, figures: TableFigures) -> None:
    """Bytes per snapshot of ``metadata.json``: least squares over every file the table wrote."""
    directory = Path(table.metadata_location.removeprefix("file://")).parent
    points: list[tuple[int, int]] = []
    for path in sorted(directory.glob("*.metadata.json")):
        with contextlib.suppress(OSError, ValueError):
            size = path.stat().st_size
            points.append((len(json.loads(path.read_text()).get("snapshots", [])), size))
    figures.metadata_files = len(points)
    if not points:
        return
    figures.metadata_bytes_last = max(points)[1]
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread > 0:
        figures.metadata_bytes_per_snapshot = (
            sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
        )


# -- /metrics --------------------------------------------------------------------------------------


def histogram(scrapes: Sequence[dict[str, float]], name: str) -> dict[float, float]:
    """Cumulative bucket counts of histogram ``name`` summed over the nodes' scrapes."""
    buckets: dict[float, float] = {}
    prefix = f"{name}_bucket"
    for scrape in scrapes:
        for key, value in scrape.items():
            if key.startswith(prefix):
                match = _LE.search(key)
                if match:
                    bound = float(match[1])  # "+Inf" parses as inf
                    buckets[bound] = buckets.get(bound, 0.0) + value
    return buckets


def summed(scrapes: Sequence[dict[str, float]], key: str) -> float:
    return sum(scrape.get(key, 0.0) for scrape in scrapes)


def quantile(buckets: dict[float, float], q: float) -> float:
    """Prometheus's ``histogram_quantile``: linear within the bucket the rank falls in."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return float("nan")
    counts = [buckets[b] for b in bounds]
    rank = q * counts[-1]
    index = bisect.bisect_left(counts, rank)
    if bounds[index] == float("inf"):
        return bounds[index - 1] if index > 0 else float("nan")  # past the last finite bound
    lower = bounds[index - 1] if index > 0 else 0.0
    below = counts[index - 1] if index > 0 else 0.0
    inside = counts[index] - below
    return lower + (bounds[index] - lower) * ((rank - below) / inside if inside else 1.0)


@dataclass(slots=True)
class CommitLatency:
    count: float = 0.0
    mean_s: float = float("nan")
    p99_s: float = float("nan")
    conflicts: float = 0.0  # the per-node landing's lost races (kip714_exporter_stat)


def commit_latency(
    before: Sequence[dict[str, float]], after: Sequence[dict[str, float]], committer: bool
) -> CommitLatency:
    name = "kip714_landing_fleet_commit_seconds" if committer else "kip714_landing_commit_seconds"
    first, last = histogram(before, name), histogram(after, name)
    delta = {bound: count - first.get(bound, 0.0) for bound, count in last.items()}
    figures = CommitLatency()
    suffix = "" if committer else '{exporter="landing"}'
    figures.count = summed(after, f"{name}_count{suffix}") - summed(before, f"{name}_count{suffix}")
    seconds = summed(after, f"{name}_sum{suffix}") - summed(before, f"{name}_sum{suffix}")
    if figures.count > 0:
        figures.mean_s = seconds / figures.count
        figures.p99_s = quantile(delta, 0.99)
    conflicts = 'kip714_exporter_stat{exporter="landing",stat="commit_conflicts"}'
    figures.conflicts = summed(after, conflicts) - summed(before, conflicts)
    return figures


# -- one point -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Point:
    mode: str
    nodes: int
    window_s: float = 0.0
    acked_rate: float = 0.0
    acked_total: int = 0
    refused: int = 0
    unanswered: int = 0
    ack_p50_s: float = float("nan")
    ack_p99_s: float = float("nan")
    generator_cores: float = 0.0
    backlog_max: int = 0  # pushes the generator was behind its schedule, at most
    drained_s: float = float("nan")
    topic_bytes: int = 0
    table: TableFigures = field(default_factory=TableFigures)
    latency: CommitLatency = field(default_factory=CommitLatency)
    load_average: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def commits_per_s(self) -> float:
        return self.table.in_window / self.window_s if self.window_s else float("nan")

    @property
    def landed_ok(self) -> bool:
        """Every acknowledged push once with its data points; none landed twice."""
        t = self.table
        return (
            self.acked_total > 0
            and self.acked_total <= t.pushes <= self.acked_total + self.unanswered
            and t.short_pushes == 0
            and t.rows == t.pushes * METRICS_PER_PUSH
        )


@dataclass(frozen=True, slots=True)
class Run:
    root: Path
    lake: Lake
    broker_data: Path  # the broker's log.dirs: the pushes topic's bytes on disk
    bootstrap: str
    args: argparse.Namespace


def node_config(run: Run, mode: str, node: str, namespace: str) -> str:
    return NODE_CONFIG.format(
        push_interval_ms=PUSH_INTERVAL_MS,
        node=node,
        uri=run.lake.uri,
        warehouse=run.lake.warehouse,
        namespace=namespace,
        file_age_s=FILE_AGE_S,
        commit_interval_s=COMMIT_INTERVAL_S,
        fleet_commits="true" if mode == "committer" else "false",
        bootstrap=run.bootstrap,
        topic=f"_bench_{namespace}",
    )


def settle(run: Run, nodes: list[Node], namespace: str, committer: bool) -> str:
    """Wait (bounded) until the landing's group is stable with every node, and one committer."""
    admin = AdminClient({"bootstrap.servers": run.bootstrap, "log_level": 0})
    group = f"kip714-landing-{namespace}"
    deadline = time.monotonic() + SETTLE_S
    state = "not asked"
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # a group not there yet, the broker busy
            described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(
                timeout=15
            )
            members = len(described.members)
            state = f"group {described.state.name.lower()} with {members} members"
            committers = sum(1 for n in nodes if n.metrics().get("kip714_landing_committer") == 1)
            if committer:
                state += f", {committers} committer(s)"
            if (
                described.state.name == "STABLE"
                and members == len(nodes)
                and (committers == 1 or not committer)
            ):
                return state
        time.sleep(1.0)
    return f"NOT SETTLED in {SETTLE_S:.0f} s: {state}"


def drain(run: Run, namespace: str, expected_rows: int) -> float:
    """Seconds until the table holds ``expected_rows`` (bounded by ``DRAIN_S``; nan past it)."""
    started = time.monotonic()
    while time.monotonic() - started < DRAIN_S:
        with contextlib.suppress(Exception):  # the catalog busy: ask again
            if run.lake.total_records(namespace) >= expected_rows:
                return time.monotonic() - started
        time.sleep(1.0)
    return float("nan")


def run_point(run: Run, mode: str, count: int) -> Point:
    args = run.args
    point = Point(mode, count)
    namespace = f"fleet_{'c' if mode == 'committer' else 'p'}{count}"
    root = run.root / namespace
    nodes = [
        Node(root, f"node{i}", node_config(run, mode, f"{namespace}-node{i}", namespace))
        for i in range(count)
    ]
    with fleet(nodes):
        point.notes.append(settle(run, nodes, namespace, mode == "committer"))
        connections = args.connections_per_node * count
        spec = LoadSpec(
            host=HOST,
            port=nodes[0].kafka_port,
            ports=tuple(n.kafka_port for n in nodes),
            mode="open",
            connections=connections,
            instances=max(args.instances, connections),
            rate=args.rate,
            warmup_s=args.warmup,
            duration_s=args.duration,
            max_pushes=int(args.rate * (args.warmup + args.duration) * 2),
            drain_timeout_s=10.0,
        )
        edges: list[float] = []
        scrapes: list[list[dict[str, float]]] = []

        def edge() -> None:
            edges.append(time.time())
            scrapes.append([n.metrics() for n in nodes])

        result: PhaseResult = run_load(spec, 1, at_window_start=edge, at_window_end=edge)
        if result.errors:
            raise RuntimeError("; ".join(result.errors))
        point.window_s = result.window_s
        point.acked_rate = result.rate
        point.acked_total = sum(w.acked_total for w in result.workers)
        point.refused = sum(w.refused_total for w in result.workers)
        point.unanswered = sum(w.unanswered for w in result.workers)
        ordered = result.latencies()
        point.generator_cores = result.generator_cpu_share()
        point.backlog_max = max((w.backlog_max for w in result.workers), default=0)
        point.ack_p50_s, point.ack_p99_s = percentile(ordered, 0.5), percentile(ordered, 0.99)
        point.load_average = load_average()
        point.latency = commit_latency(scrapes[0], scrapes[1], mode == "committer")
        point.drained_s = drain(run, namespace, point.acked_total * METRICS_PER_PUSH)
        dead = [n.name for n in nodes if not n.alive()]
        if dead:
            point.notes.append(f"DIED during the point: {', '.join(dead)}")
        warned = {n.name: n.warnings for n in nodes if n.warnings}
        if warned:
            point.notes.append(f"warnings/errors logged: {warned}")
            for node in nodes:
                for line in node.log_tail[-3:] if node.warnings else []:
                    point.notes.append(f"  {node.name}: {line[:300]}")
    point.table = read_table(run.lake, namespace, (edges[0], edges[1]))
    point.topic_bytes = sum(
        f.stat().st_size for f in run.broker_data.glob(f"_bench_{namespace}-*/*.log")
    )
    return point


# -- output --------------------------------------------------------------------------------------


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _s(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f} s"


def describe(point: Point) -> str:
    t, lat = point.table, point.latency
    landed = "ok" if point.landed_ok else "MISS"
    conflicts = "" if point.mode == "committer" else f", {lat.conflicts:.0f} conflicts"
    return (
        f"{point.mode:<9} N={point.nodes}: {point.acked_rate:,.0f} acked pushes/s"
        f" (ack p50 {_s(point.ack_p50_s)} p99 {_s(point.ack_p99_s)}, {point.refused} refused,"
        f" {point.unanswered} unanswered; generator {point.generator_cores:.2f} cores,"
        f" {point.backlog_max:,} behind schedule at most);"
        f" landed {t.pushes:,} pushes / {t.rows:,} rows for {point.acked_total:,} acked [{landed}]"
        f" (drained in {_s(point.drained_s)});"
        f" {point.commits_per_s:.3f} commits/s ({t.in_window} in {point.window_s:.0f} s);"
        f" commit p99 {_s(lat.p99_s)} mean {_s(lat.mean_s)} ({lat.count:.0f} commits{conflicts});"
        f" lag p99 {_s(t.lag_p99_s)} p50 {_s(t.lag_p50_s)} max {_s(t.lag_max_s)};"
        f" metadata.json {t.metadata_bytes_per_snapshot:,.0f} B/snapshot"
        f" ({t.metadata_bytes_last:,} B at {t.snapshots} snapshots; kip714.kafka.offsets"
        f" {t.offsets_bytes:,} B for {t.offsets_partitions} partitions; manifest list"
        f" {t.manifest_list_bytes:,} B for {t.manifests} manifests);"
        f" topic {point.topic_bytes / max(point.acked_total, 1):,.0f} B/push;"
        f" load average {point.load_average}"
    )


def table(points: list[Point]) -> str:
    lines = [
        "| mode | N | acked pushes/s | landed = acked | commits/s | commit p99 (mean) |"
        " lag p99 (p50) | metadata B/snapshot | load avg (1 min) |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in points:
        t, lat = p.table, p.latency
        lines.append(
            f"| {p.mode} | {p.nodes} | {p.acked_rate:,.0f} |"
            f" {'yes' if p.landed_ok else 'NO'} ({t.pushes:,}/{p.acked_total:,}) |"
            f" {p.commits_per_s:.3f} | {_s(lat.p99_s)} ({_s(lat.mean_s)}) |"
            f" {_s(t.lag_p99_s)} ({_s(t.lag_p50_s)}) | {t.metadata_bytes_per_snapshot:,.0f} |"
            f" {p.load_average.split()[0] if p.load_average else ''} |"
        )
    return "\n".join(lines)


def per_node_outlook(points: list[Point]) -> list[str]:
    """Per-node mode: commits offered against taken, and where one table stops keeping up.

    N nodes offer at most N / ``max_file_age_s`` commits/s (less when a node's own commit
    takes long: it commits one generation at a time). One table serialises its commits on one
    metadata pointer, so it takes at most about 1 / (one commit's time) of them: extrapolated
    from N = 1's mean commit time (no other writer), the node count where N /
    ``max_file_age_s`` reaches that budget. Conflicts' retries make the real count lower.
    """
    per_node = [p for p in points if p.mode == "per-node"]
    lines = [
        f"per-node N={p.nodes}: at most {p.nodes / FILE_AGE_S:.2f} commits/s offered, the table"
        f" took {p.commits_per_s:.2f}/s with {p.latency.conflicts:.0f} conflicts; mean commit"
        f" {_s(p.latency.mean_s)}, lag p99 {_s(p.table.lag_p99_s)} (measured)"
        for p in per_node
    ]
    alone = next((p for p in per_node if p.nodes == 1 and p.latency.mean_s > 0), None)
    if alone is not None:
        mean = alone.latency.mean_s
        lines.append(
            f"per-node: one commit alone (N=1) took {_s(mean)} on average, so one table takes at"
            f" most ~{1 / mean:.1f} commits/s and per-node commits every {FILE_AGE_S:g} s stop"
            f" keeping up at about N = {FILE_AGE_S / mean:.0f} (extrapolated; conflicts make it"
            " fewer)"
        )
    return lines


def targets(points: list[Point], quick: bool) -> tuple[str, bool]:
    judged = [p for p in points if p.mode == "committer"]
    if not judged:
        return "targets: no committer-mode point was run [MISS]", False
    limit = 1 / COMMIT_INTERVAL_S
    commits_ok = all(p.commits_per_s <= limit for p in judged)
    landed_ok = all(p.landed_ok for p in judged)
    lag_ok = all(p.table.lag_p99_s <= LAG_TARGET_S for p in judged)  # nan fails
    worst_rate = max(judged, key=lambda p: p.commits_per_s)
    worst_lag = max(judged, key=lambda p: p.table.lag_p99_s)

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISS"

    line = (
        f"targets (committer mode, commit_interval_s = {COMMIT_INTERVAL_S:g} s,"
        f" N = {', '.join(str(p.nodes) for p in judged)}):"
        f" commits/s <= {limit:.2f} [{verdict(commits_ok)}] (max {worst_rate.commits_per_s:.3f}"
        f" at N={worst_rate.nodes}), landed == acknowledged [{verdict(landed_ok)}],"
        f" lag p99 <= {LAG_TARGET_S:g} s [{verdict(lag_ok)}] (max {_s(worst_lag.table.lag_p99_s)}"
        f" at N={worst_lag.nodes}); per-node mode printed beside, not judged"
        + (" (quick run: short windows)" if quick else "")
    )
    return line, commits_ok and landed_ok and lag_ok


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=2_000.0, help="offered pushes/s, in total")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds per point")
    parser.add_argument("--warmup", type=float, default=10.0, help="unmeasured seconds before")
    parser.add_argument(
        "--nodes", type=int, action="append", help="a node count (repeatable); default 1 2 4 8"
    )
    parser.add_argument("--modes", choices=(*MODES, "both"), default="both")
    parser.add_argument(
        "--instances",
        type=int,
        default=6_000,
        help="client instances (each pushes at most every 100 ms, once its last push is"
        " answered: enough that the offered rate holds with seconds of acknowledgement latency)",
    )
    parser.add_argument("--connections-per-node", type=int, default=16)
    parser.add_argument(
        "--quick", action="store_true", help="N = 1, 2 and short windows, for development"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.duration = min(args.duration, 10.0)
        args.warmup = min(args.warmup, 5.0)
    args.nodes = tuple(args.nodes or (QUICK_NODE_COUNTS if args.quick else NODE_COUNTS))
    args.modes = MODES if args.modes == "both" else (args.modes,)
    if args.rate <= 0 or args.duration <= 0 or args.warmup < 0 or args.instances <= 0:
        parser.error("--rate, --duration and --instances must be positive, --warmup >= 0")
    if args.duration > 600 or args.warmup > 120 or args.rate > 20_000:
        parser.error("bounded: --duration <= 600, --warmup <= 120, --rate <= 20000")
    if not all(1 <= n <= 16 for n in args.nodes) or not 1 <= args.connections_per_node <= 200:
        parser.error("bounded: 1 <= --nodes <= 16, 1 <= --connections-per-node <= 200")
    return args


def wait_for_producer_ids(bootstrap: str) -> None:
    """Until an idempotent produce completes, the broker's coordinators are still loading."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 0}
    )
    producer.produce("kip714-fleet-bench-ready", b"ready")
    if producer.flush(60) != 0:
        raise RuntimeError("the broker did not complete an idempotent produce within 60 s")


@contextlib.contextmanager
def broker(root: Path) -> Iterator[KafkaBroker]:
    # The broker plugin is not configured here (the nodes read the pushes topic), so no
    # plugin jar is built: the jars' directory stands in for its class path entry.
    jars = kafka_jars()
    started = KafkaBroker(root / "broker", jars, jars, {})
    try:
        started.start()
        wait_for_producer_ids(started.bootstrap)
        yield started
    finally:
        started.stop()
        started.kill()


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kip714-fleet-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    print(
        f"machine: {os.cpu_count()} cores shared by the broker, PostgreSQL, the nodes (each"
        f" kip714 serve + 1 landing worker) and 1 load process; offered {args.rate:,.0f} pushes/s"
        f" in total, open loop, {METRICS_PER_PUSH} data points each, spread over the nodes;"
        f" {args.warmup:g} s warm-up + {args.duration:g} s measured per point;"
        f" commit_interval_s = max_file_age_s = {COMMIT_INTERVAL_S:g} s;"
        f" load average {load_average()}",
        flush=True,
    )
    points: list[Point] = []
    with workdir() as root, postgres() as catalog_server, broker(root) as kafka:
        warehouse = root / "warehouse"
        warehouse.mkdir()
        lake = Lake(catalog_server.url(), warehouse.as_uri())
        run = Run(root, lake, root / "broker" / "data", kafka.bootstrap, args)
        print(
            f"broker and PostgreSQL up in {time.monotonic() - began:.0f} s"
            f" (load average {load_average()})",
            flush=True,
        )
        for count in args.nodes:
            for mode in args.modes:
                try:
                    point = run_point(run, mode, count)
                except Exception as error:  # the point failed: say so, judge it missed, go on
                    point = Point(mode, count, load_average=load_average())
                    point.notes.append(f"FAILED: {type(error).__name__}: {error}")
                points.append(point)
                print(describe(point), flush=True)
                for note in point.notes:
                    print(f"    {note}", flush=True)
    print(table(points), flush=True)
    for outlook in per_node_outlook(points):
        print(outlook, flush=True)
    line, ok = targets(points, args.quick)
    print(f"wall time {(time.monotonic() - began) / 60:.1f} min", flush=True)
    print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
