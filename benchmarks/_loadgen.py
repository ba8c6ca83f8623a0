"""Simulated KIP-714 clients over the Kafka protocol, in worker processes, for the benchmarks.

Reusable pieces:

* :func:`build_payloads`: librdkafka-shaped OTLP ``MetricsData`` with 60 metrics
  (8 client-level producer metrics and the two per-broker request-latency
  gauges for 26 brokers, as librdkafka repeats per-broker metrics with a
  ``node.id`` attribute), zstd-compressed without a content size, as
  librdkafka sends it.
* :func:`run_load`: starts ``processes`` worker processes, each running one
  asyncio event loop with many connections, each carrying several client
  instances; every instance does ApiVersions + GetTelemetrySubscriptions
  (with the ZERO uuid, so the server hands out a fresh instance id) and then
  pushes no sooner than its push interval allows. Three modes:

  - ``closed``: one request in flight per connection; an instance pushes as
    soon as its interval has passed since its last acknowledgement, so the
    offered rate is bounded by the server, not by a schedule. Latency is
    send → acknowledgement.
  - ``open``: pushes are offered at a fixed total rate whatever the latency
    (requests are pipelined on a connection, as the Kafka protocol allows);
    latency is measured from the *intended* send time, so a stalled server
    cannot hide its stall (no coordinated omission).
  - ``instances``: every instance GETs once and pushes once, then the
    connections stay open (the server forgets instances on disconnect) until
    the coordinator has measured what it wanted.

* :func:`bare_server_main`: the ceiling, a bare ``asyncio.Protocol`` on the
  event loop ``kip714 serve`` runs (uvloop), splitting the same size-prefixed
  frames out of one buffer as kip714's listener does and answering each with
  a canned response carrying the right correlation id, doing no other work.
  kip714's share of this ceiling is what its own work costs.

Everything is bounded: setup, the measured window and the drain each have a
deadline, sends stop at ``max_pushes``, and :func:`run_load` terminates its
processes on the way out whatever happened. Only loopback addresses are used.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import heapq
import http.client
import multiprocessing
import queue
import random
import struct
import time
import traceback
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final, Literal, cast

import zstandard
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_DELTA,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)

from telemetry.wire import (
    ApiKey,
    ApiVersionsRequest,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
    RequestHeader,
    api_versions_response,
    decode_response,
    encode_request,
    encode_response,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from multiprocessing.context import SpawnProcess

__all__ = [
    "METRICS_PER_PUSH",
    "LoadSpec",
    "PhaseResult",
    "WorkerResult",
    "bare_server_main",
    "build_metrics_data",
    "build_payloads",
    "percentile",
    "run_load",
    "start_bare_server",
]

Mode = Literal["closed", "open", "instances"]

ZSTD: Final = 4
ERROR_THROTTLED: Final = 89
CLIENT_ID: Final = "kip714-bench-producer"
SOFTWARE_NAME: Final = "kip714-bench"
SOFTWARE_VERSION: Final = "0.1.0"

_SIZE: Final = struct.Struct(">i")
_REQUEST_HEAD: Final = struct.Struct(">hhi")  # api key, api version, correlation id
_PUSH_ANSWER: Final = struct.Struct(">ih")  # after correlation id + empty tagged fields
_CORRELATION_AT: Final = 8  # size prefix, api key, api version, then the correlation id
_PUSH_RESPONSE_SIZE: Final = 4 + 1 + 4 + 2 + 1  # corr, header tags, throttle, error, body tags
#: Added to the push interval before an instance pushes again, so the server's
#: millisecond wall clock always sees a full interval.
_INTERVAL_MARGIN_S: Final = 0.002
_CONNECT_CONCURRENCY: Final = 48  # below asyncio's default listen backlog of 100

# -- payload ------------------------------------------------------------------------------------

_PREFIX: Final = "org.apache.kafka.producer."
# (name, description, kind, int-valued); librdkafka 2.16's producer catalogue.
_CLIENT_METRICS: Final = (
    ("connection.creation.rate", "The rate of connections established per second.", "g", False),
    ("connection.creation.total", "The total number of connections established.", "s", True),
    ("produce.throttle.time.avg", "The average throttle time in ms for a node.", "g", False),
    ("produce.throttle.time.max", "The maximum throttle time in ms for a node.", "g", True),
    (
        "record.queue.time.avg",
        "The average time in ms a record spends in the producer queue.",
        "g",
        False,
    ),
    (
        "record.queue.time.max",
        "The maximum time in ms a record spends in the producer queue.",
        "g",
        True,
    ),
    ("request.latency.avg", "The average request latency in ms for produce requests.", "g", False),
    ("request.latency.max", "The maximum request latency in ms for produce requests.", "g", True),
)
_BROKER_METRICS: Final = (
    ("node.request.latency.avg", "The average request latency in ms for a node.", False),
    ("node.request.latency.max", "The maximum request latency in ms for a node.", True),
)
BROKERS: Final = 26
METRICS_PER_PUSH: Final = len(_CLIENT_METRICS) + len(_BROKER_METRICS) * BROKERS  # 60


def _point(
    rng: random.Random, start_ns: int, now_ns: int, as_int: bool, scale: float
) -> NumberDataPoint:
    point = NumberDataPoint(start_time_unix_nano=start_ns, time_unix_nano=now_ns)
    if as_int:
        point.as_int = int(rng.expovariate(1 / scale)) if scale else 0
    else:
        point.as_double = round(rng.expovariate(1 / scale), 6) if scale else 0.0
    return point


def build_metrics_data(
    rng: random.Random, client_id: str = CLIENT_ID, now_ns: int | None = None
) -> MetricsData:
    """One librdkafka-shaped producer push of :data:`METRICS_PER_PUSH` metrics."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    start_ns = now_ns - rng.randint(950, 1050) * 1_000_000
    scope = ScopeMetrics(
        scope=InstrumentationScope(name=f"{client_id}#producer-1", version="2.16.0")
    )
    for name, description, kind, as_int in _CLIENT_METRICS:
        scale = 0.0 if name.startswith("connection.creation") else rng.choice((0.01, 0.5, 4.0))
        point = _point(rng, start_ns, now_ns, as_int, scale)
        metric = Metric(name=_PREFIX + name, description=description)
        if kind == "s":
            metric.sum.CopyFrom(
                Sum(
                    data_points=[point],
                    aggregation_temporality=AGGREGATION_TEMPORALITY_DELTA,
                    is_monotonic=True,
                )
            )
        else:
            metric.gauge.CopyFrom(Gauge(data_points=[point]))
        scope.metrics.append(metric)
    for node_id in range(BROKERS, 0, -1):  # librdkafka lists the newest broker handle first
        for name, description, as_int in _BROKER_METRICS:
            point = _point(rng, start_ns, now_ns, as_int, rng.choice((0.3, 1.5, 12.0)))
            point.attributes.append(KeyValue(key="node.id", value=AnyValue(int_value=node_id)))
            metric = Metric(name=_PREFIX + name, description=description)
            metric.gauge.CopyFrom(Gauge(data_points=[point]))
            scope.metrics.append(metric)
    return MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[scope])])


def build_payloads(variants: int = 8, seed: int = 0) -> list[bytes]:
    """``variants`` zstd payloads (no content size in the frame, as librdkafka's)."""
    rng = random.Random(seed)
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=False)
    return [
        compressor.compress(build_metrics_data(rng).SerializeToString()) for _ in range(variants)
    ]


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSpec:
    """One phase of load; ``connections`` and ``instances`` are per worker process."""

    host: str
    port: int
    mode: Mode
    connections: int
    instances: int
    rate: float = 0.0  # pushes/s of this process (open mode)
    warmup_s: float = 1.0
    duration_s: float = 10.0
    max_pushes: int = 1_000_000  # per process, hard cap on pushes sent
    setup_timeout_s: float = 120.0
    drain_timeout_s: float = 3.0
    payload_variants: int = 8
    seed: int = 0
    client_id: str = CLIENT_ID  # the request header's client id: what client quotas key on
    #: Several servers (a fleet): connection ``i`` goes to ``ports[i % len(ports)]``, so
    #: instances, and in open mode the offered pushes, spread evenly over them; empty: ``port``.
    ports: tuple[int, ...] = ()


@dataclass(slots=True, kw_only=True)
class WorkerResult:
    """What one worker saw; window figures count acknowledgements inside the measured window."""

    index: int
    instances: int = 0
    connections: int = 0
    gets_ok: int = 0
    gets_refused: int = 0
    sent: int = 0
    acked: int = 0
    refused: dict[int, int] = field(default_factory=dict)
    acked_total: int = 0
    refused_total: int = 0
    unanswered: int = 0
    lost_connections: int = 0
    backlog_max: int = 0
    latencies: bytes = b""  # array('d') of seconds, acknowledgements in the window
    cpu_s: float = 0.0  # this process's CPU time in the window
    elapsed_s: float = 0.0  # instances mode: time to GET and push every instance
    payload_bytes: int = 0
    error: str = ""


@dataclass(slots=True, kw_only=True)
class PhaseResult:
    spec: LoadSpec
    processes: int
    workers: list[WorkerResult]
    window_s: float

    @property
    def acked(self) -> int:
        return sum(w.acked for w in self.workers)

    @property
    def refused(self) -> int:
        return sum(sum(w.refused.values()) for w in self.workers)

    @property
    def throttled(self) -> int:
        return sum(w.refused.get(ERROR_THROTTLED, 0) for w in self.workers)

    @property
    def rate(self) -> float:
        return self.acked / self.window_s if self.window_s > 0 else 0.0

    @property
    def errors(self) -> list[str]:
        return [w.error for w in self.workers if w.error]

    def latencies(self) -> list[float]:
        merged = array.array("d")
        for worker in self.workers:
            merged.frombytes(worker.latencies)
        return sorted(merged)

    def generator_cpu_share(self) -> float:
        """Cores the generator processes used in the window."""
        return sum(w.cpu_s for w in self.workers) / self.window_s if self.window_s else 0.0


def percentile(ordered: Sequence[float], fraction: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


# -- the client side ----------------------------------------------------------------------------


class _Instance:
    """One simulated client instance: its identity, its push frame, when it may push."""

    __slots__ = ("conn", "due", "head", "interval_s", "tail")

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn
        self.due = 0.0
        self.interval_s = 0.0
        self.head = b""
        self.tail = b""

    def set_push_frame(
        self,
        instance_id: uuid.UUID,
        subscription_id: int,
        interval_ms: int,
        payload: bytes,
        client_id: str = CLIENT_ID,
    ) -> None:
        frame = encode_request(
            RequestHeader(
                api_key=ApiKey.PUSH_TELEMETRY, api_version=0, correlation_id=0, client_id=client_id
            ),
            PushTelemetryRequest(
                client_instance_id=instance_id,
                subscription_id=subscription_id,
                terminating=False,
                compression_type=ZSTD,
                metrics=payload,
            ),
        )
        self.head = frame[:_CORRELATION_AT]
        self.tail = frame[_CORRELATION_AT + 4 :]
        self.interval_s = interval_ms / 1000 + _INTERVAL_MARGIN_S


class _Pending:
    __slots__ = ("correlation_id", "future", "instance", "reference")

    def __init__(
        self,
        correlation_id: int,
        instance: _Instance | None,
        reference: float,
        future: asyncio.Future[bytes] | None,
    ) -> None:
        self.correlation_id = correlation_id
        self.instance = instance
        self.reference = reference
        self.future = future


class _Connection(asyncio.Protocol):
    """A client connection; responses come back in request order (Kafka's muted channel)."""

    def __init__(self, worker: _Worker) -> None:
        self.worker = worker
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.pending: deque[_Pending] = deque()
        self.correlation_id = 0
        self.instances: deque[_Instance] = deque()  # closed mode: by due time
        self.timer: asyncio.TimerHandle | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.timer is not None:
            self.timer.cancel()
        for pending in self.pending:
            if pending.future is not None and not pending.future.done():
                pending.future.set_exception(ConnectionError("connection lost"))
        self.worker.on_lost(self)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        available = len(buffer)
        position = 0
        while available - position >= 4:
            (size,) = _SIZE.unpack_from(buffer, position)
            end = position + 4 + size
            if end > available:
                break
            self._on_response(bytes(buffer[position + 4 : end]))
            position = end
        if position:
            del buffer[:position]

    def _on_response(self, frame: bytes) -> None:
        if not self.pending:
            raise RuntimeError("a response nobody asked for")
        pending = self.pending.popleft()
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        if correlation_id != pending.correlation_id:
            raise RuntimeError(
                f"correlation id {correlation_id}, expected {pending.correlation_id}"
            )
        if pending.future is not None:
            if not pending.future.done():
                pending.future.set_result(frame)
            return
        assert pending.instance is not None
        if len(frame) == _PUSH_RESPONSE_SIZE and frame[4] == 0:
            _throttle, error_code = _PUSH_ANSWER.unpack_from(frame, 5)
        else:
            _, response = decode_response(frame, ApiKey.PUSH_TELEMETRY, 0)
            assert isinstance(response, PushTelemetryResponse)
            error_code = response.error_code
        self.worker.on_push_answer(self, pending.instance, pending.reference, error_code)

    def _next_correlation_id(self) -> int:
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        return self.correlation_id

    def send_push(self, instance: _Instance, reference: float) -> None:
        assert self.transport is not None
        correlation_id = self._next_correlation_id()
        self.pending.append(_Pending(correlation_id, instance, reference, None))
        self.transport.write(instance.head + _SIZE.pack(correlation_id) + instance.tail)

    async def call(self, header: RequestHeader, request: object) -> bytes:
        """Send one request and return its response frame (setup traffic, not timed)."""
        assert self.transport is not None
        if self.lost:
            raise ConnectionError("connection lost")
        correlation_id = self._next_correlation_id()
        header = replace(header, correlation_id=correlation_id)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.pending.append(_Pending(correlation_id, None, 0.0, future))
        self.transport.write(_encode_any(header, request))
        return await future


def _header(api_key: ApiKey, version: int, client_id: str = CLIENT_ID) -> RequestHeader:
    return RequestHeader(
        api_key=api_key, api_version=version, correlation_id=0, client_id=client_id
    )


class _Worker:
    """One process's event loop of connections and instances."""

    def __init__(self, spec: LoadSpec, index: int) -> None:
        self.spec = spec
        self.loop = asyncio.get_running_loop()
        self.result = WorkerResult(index=index)
        self.rng = random.Random(spec.seed * 1000 + index)
        self.payloads = build_payloads(spec.payload_variants, seed=spec.seed * 1000 + index)
        self.result.payload_bytes = sum(map(len, self.payloads)) // len(self.payloads)
        self.connections: list[_Connection] = []
        self.instances: list[_Instance] = []
        self.latencies = array.array("d")
        self.refused: Counter[int] = Counter()
        self.window_start = float("inf")
        self.window_end = float("inf")
        self.stop_sending_at = float("inf")
        self.stopping = False
        self.in_flight = 0
        self.idle = asyncio.Event()
        # open mode
        self.ready: list[tuple[float, int, _Instance]] = []
        self.sequence = 0
        self.offered = 0
        self.t0 = 0.0

    # -- setup ----------------------------------------------------------------------------------

    async def setup(self, with_instances: bool) -> None:
        spec = self.spec
        gate = asyncio.Semaphore(_CONNECT_CONCURRENCY)
        per_connection = [
            spec.instances // spec.connections + (1 if i < spec.instances % spec.connections else 0)
            for i in range(spec.connections)
        ]

        async def open_one(count: int, port: int) -> None:
            async with gate:
                _, conn = await self.loop.create_connection(
                    lambda: _Connection(self), spec.host, port
                )
                self.connections.append(conn)
                await conn.call(
                    _header(ApiKey.API_VERSIONS, 3, spec.client_id),
                    ApiVersionsRequest(
                        client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION
                    ),
                )
            if with_instances:
                for _ in range(count):
                    await self.new_instance(conn)

        async with asyncio.timeout(spec.setup_timeout_s):
            await asyncio.gather(
                *(
                    open_one(n, spec.ports[i % len(spec.ports)] if spec.ports else spec.port)
                    for i, n in enumerate(per_connection)
                )
            )
        self.result.connections = len(self.connections)
        self.result.instances = len(self.instances)

    async def new_instance(self, conn: _Connection) -> _Instance | None:
        """GET with the ZERO uuid: the server names a fresh instance and its subscription."""
        frame = await conn.call(
            _header(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, self.spec.client_id),
            GetTelemetrySubscriptionsRequest(),
        )
        _, response = decode_response(frame, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0)
        assert isinstance(response, GetTelemetrySubscriptionsResponse)
        if response.error_code != 0:
            self.result.gets_refused += 1
            return None
        self.result.gets_ok += 1
        instance = _Instance(conn)
        instance.set_push_frame(
            response.client_instance_id,
            response.subscription_id,
            response.push_interval_ms,
            self.payloads[len(self.instances) % len(self.payloads)],
            self.spec.client_id,
        )
        self.instances.append(instance)
        return instance

    # -- the measured run -----------------------------------------------------------------------

    def arm(self, start_wall: float) -> None:
        spec = self.spec
        start = self.loop.time() + (start_wall - time.time())
        self.t0 = start
        self.window_start = start + spec.warmup_s
        self.window_end = self.window_start + spec.duration_s
        self.stop_sending_at = self.window_end

    def start_closed(self) -> None:
        for instance in self.instances:
            # First push after the GET is always accepted; spread them over one interval.
            instance.due = self.t0 + self.rng.uniform(0, instance.interval_s)
        for conn in self.connections:
            members = sorted((i for i in self.instances if i.conn is conn), key=lambda i: i.due)
            conn.instances.extend(members)
            self.pump(conn)

    def pump(self, conn: _Connection) -> None:
        """Closed mode: send the connection's next instance's push once it is due."""
        conn.timer = None
        if self.stopping or conn.pending or conn.lost or not conn.instances:
            return
        now = self.loop.time()
        if now >= self.stop_sending_at or self.result.sent >= self.spec.max_pushes:
            self.begin_stop()
            return
        instance = conn.instances[0]
        if instance.due > now:
            conn.timer = self.loop.call_at(instance.due, self.pump, conn)
            return
        conn.instances.popleft()
        self.send(conn, instance, now)

    def send(self, conn: _Connection, instance: _Instance, reference: float) -> None:
        self.result.sent += 1
        self.in_flight += 1
        conn.send_push(instance, reference)

    def start_open(self) -> None:
        for instance in self.instances:
            instance.due = self.t0 + self.rng.uniform(0, instance.interval_s)
            self._ready(instance)
        self.loop.call_at(self.t0, self.tick)

    def _ready(self, instance: _Instance) -> None:
        self.sequence += 1
        heapq.heappush(self.ready, (instance.due, self.sequence, instance))

    def tick(self) -> None:
        """Open mode: offer every push whose intended time has come."""
        if self.stopping:
            return
        now = self.loop.time()
        if now >= self.stop_sending_at or self.result.sent >= self.spec.max_pushes:
            self.begin_stop()
            return
        rate = self.spec.rate
        target = int((now - self.t0) * rate) + 1
        ready = self.ready
        while self.offered < target:
            if not ready or ready[0][0] > now:
                break  # no instance may push yet: a backlog, measured from intended times
            _, _, instance = heapq.heappop(ready)
            if instance.conn.lost:
                continue
            intended = self.t0 + self.offered / rate
            self.offered += 1
            self.send(instance.conn, instance, intended)
        backlog = target - self.offered
        self.result.backlog_max = max(self.result.backlog_max, backlog)
        next_at = self.t0 + self.offered / rate if backlog <= 0 else now + 0.001
        self.loop.call_at(max(next_at, now + 0.001), self.tick)

    def on_push_answer(
        self, conn: _Connection, instance: _Instance, reference: float, error_code: int
    ) -> None:
        now = self.loop.time()
        self.in_flight -= 1
        result = self.result
        in_window = self.window_start <= now < self.window_end
        if error_code == 0:
            result.acked_total += 1
            if in_window:
                result.acked += 1
                self.latencies.append(now - reference)
        else:
            result.refused_total += 1
            if in_window:
                self.refused[error_code] += 1
        instance.due = now + instance.interval_s
        if self.spec.mode == "closed":
            conn.instances.append(instance)
            self.pump(conn)
        elif self.spec.mode == "open":
            self._ready(instance)
        if self.stopping and self.in_flight == 0:
            self.idle.set()

    def on_lost(self, conn: _Connection) -> None:
        if not self.stopping:
            self.result.lost_connections += 1
        self.in_flight -= sum(1 for p in conn.pending if p.instance is not None)
        conn.pending.clear()
        if self.stopping and self.in_flight <= 0:
            self.idle.set()

    def begin_stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            if self.in_flight <= 0:
                self.idle.set()

    async def run_window(self) -> None:
        """Run from t0 until the window ends, then drain what is in flight."""
        mode = self.spec.mode
        delay = max(0.0, self.t0 - self.loop.time())
        await asyncio.sleep(delay)
        if mode == "closed":
            self.start_closed()
        else:
            self.start_open()
        await asyncio.sleep(max(0.0, self.window_start - self.loop.time()))
        cpu_start = time.process_time()
        await asyncio.sleep(max(0.0, self.window_end - self.loop.time()))
        self.result.cpu_s = time.process_time() - cpu_start
        self.begin_stop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.spec.drain_timeout_s):
                await self.idle.wait()
        self.result.unanswered = max(0, self.in_flight)

    async def run_instances(self) -> None:
        """GET once and push once per instance, as fast as the connections allow."""
        spec = self.spec
        per_connection = [
            spec.instances // spec.connections + (1 if i < spec.instances % spec.connections else 0)
            for i in range(spec.connections)
        ]

        async def one_connection(conn: _Connection, count: int) -> None:
            for _ in range(count):
                if self.result.sent >= spec.max_pushes:
                    return
                instance = await self.new_instance(conn)
                if instance is None:
                    continue
                self.result.sent += 1
                started = self.loop.time()
                frame = await conn.call(
                    _header(ApiKey.PUSH_TELEMETRY, 0, spec.client_id),
                    _PushFrame(instance.head + _SIZE.pack(0) + instance.tail),
                )
                _, response = decode_response(frame, ApiKey.PUSH_TELEMETRY, 0)
                assert isinstance(response, PushTelemetryResponse)
                if response.error_code == 0:
                    self.result.acked += 1
                    self.result.acked_total += 1
                    self.latencies.append(self.loop.time() - started)
                else:
                    self.refused[response.error_code] += 1
                    self.result.refused_total += 1

        cpu_start = time.process_time()
        started = self.loop.time()
        async with asyncio.timeout(spec.setup_timeout_s):
            await asyncio.gather(
                *(
                    one_connection(c, n)
                    for c, n in zip(self.connections, per_connection, strict=True)
                )
            )
        self.result.cpu_s = time.process_time() - cpu_start
        self.result.elapsed_s = self.loop.time() - started
        self.result.instances = len(self.instances)

    def finish(self) -> WorkerResult:
        self.result.refused = dict(self.refused)
        self.result.latencies = self.latencies.tobytes()
        return self.result

    def close(self) -> None:
        for conn in self.connections:
            if conn.timer is not None:
                conn.timer.cancel()
            if conn.transport is not None:
                conn.transport.abort()


@dataclass(frozen=True, slots=True)
class _PushFrame:
    """A ready push frame for :meth:`_Connection.call` (instances mode)."""

    frame: bytes


def _encode_any(header: RequestHeader, request: object) -> bytes:
    if isinstance(request, _PushFrame):
        frame = bytearray(request.frame)
        _SIZE.pack_into(frame, _CORRELATION_AT, header.correlation_id)
        return bytes(frame)
    return encode_request(header, request)  # type: ignore[arg-type]


def _command(
    commands: multiprocessing.Queue[tuple[str, float]], timeout: float
) -> tuple[str, float]:
    try:
        return commands.get(timeout=timeout)
    except queue.Empty:
        return ("abort", 0.0)


async def _worker_async(
    spec: LoadSpec,
    index: int,
    commands: multiprocessing.Queue[tuple[str, float]],
    results: multiprocessing.Queue[tuple[str, int, object]],
) -> None:
    worker = _Worker(spec, index)
    loop = asyncio.get_running_loop()
    try:
        await worker.setup(with_instances=spec.mode != "instances")
        results.put(("ready", index, worker.result.instances))
        command, start_wall = await loop.run_in_executor(
            None, _command, commands, spec.setup_timeout_s
        )
        if command != "start":
            return
        if spec.mode == "instances":
            await asyncio.sleep(max(0.0, start_wall - time.time()))
            await worker.run_instances()
        else:
            worker.arm(start_wall)
            await worker.run_window()
        results.put(("done", index, worker.finish()))
        if spec.mode == "instances":
            # Hold the connections (and so the server's instances) until released.
            await loop.run_in_executor(None, _command, commands, spec.setup_timeout_s)
    except Exception as error:
        worker.result.error = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=4)}"
        results.put(("failed", index, worker.finish()))
    finally:
        worker.close()
        await asyncio.sleep(0)  # let the transports close


def worker_main(
    spec: LoadSpec,
    index: int,
    commands: multiprocessing.Queue[tuple[str, float]],
    results: multiprocessing.Queue[tuple[str, int, object]],
) -> None:
    """Entry point of one load-generator process."""
    asyncio.run(_worker_async(spec, index, commands, results))


def _split(total: float, parts: int, index: int) -> int:
    return int(total) // parts + (1 if index < int(total) % parts else 0)


class _Workers:
    """The worker processes of one phase and their queues; :meth:`stop` always ends them."""

    def __init__(self, spec: LoadSpec, processes: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.results: multiprocessing.Queue[tuple[str, int, object]] = ctx.Queue()
        self.commands: list[multiprocessing.Queue[tuple[str, float]]] = []
        self.procs: list[SpawnProcess] = []
        for index in range(processes):
            part = replace(
                spec,
                connections=max(1, _split(spec.connections, processes, index)),
                instances=_split(spec.instances, processes, index),
                rate=spec.rate / processes,
                max_pushes=max(1, _split(spec.max_pushes, processes, index)),
            )
            commands: multiprocessing.Queue[tuple[str, float]] = ctx.Queue()
            self.commands.append(commands)
            proc = ctx.Process(
                target=worker_main,
                args=(part, index, commands, self.results),
                name=f"loadgen-{index}",
                daemon=True,
            )
            proc.start()
            self.procs.append(proc)

    def broadcast(self, command: str, value: float = 0.0) -> None:
        for commands in self.commands:
            commands.put((command, value))

    def collect(self, kind: str, timeout_s: float) -> dict[int, WorkerResult | None]:
        """One ``kind`` report from every worker; a failure report raises."""
        deadline = time.monotonic() + timeout_s
        reports: dict[int, WorkerResult | None] = {}
        while len(reports) < len(self.procs):
            remaining = deadline - time.monotonic()
            try:
                got, index, payload = self.results.get(timeout=max(0.001, remaining))
            except queue.Empty:
                raise TimeoutError(f"load workers did not report {kind!r} in time") from None
            if got == "failed":
                error = payload.error if isinstance(payload, WorkerResult) else payload
                raise RuntimeError(f"load worker {index} failed: {error}")
            if got == kind:
                reports[index] = payload if isinstance(payload, WorkerResult) else None
        return reports

    def stop(self) -> None:
        for proc in self.procs:
            proc.join(timeout=5)
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=3)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=3)
        self.results.close()
        self.results.cancel_join_thread()
        for commands in self.commands:
            commands.close()
            commands.cancel_join_thread()


def run_load(
    spec: LoadSpec,
    processes: int,
    *,
    at_window_start: Callable[[], None] | None = None,
    at_window_end: Callable[[], None] | None = None,
    while_holding: Callable[[], None] | None = None,
) -> PhaseResult:
    """Run one phase in ``processes`` worker processes; ``spec`` counts are totals.

    ``spec.connections``, ``spec.instances``, ``spec.rate`` and
    ``spec.max_pushes`` are split over the processes. The hooks run in this
    process at the window's edges (to scrape server metrics) and, in instances
    mode, while every instance is still connected.
    """
    workers = _Workers(spec, processes)
    try:
        workers.collect("ready", spec.setup_timeout_s + 30)
        start_wall = time.time() + 0.3
        workers.broadcast("start", start_wall)
        timeout = spec.setup_timeout_s + 30
        if spec.mode != "instances":
            _sleep_until_wall(start_wall + spec.warmup_s)
            if at_window_start is not None:
                at_window_start()
            _sleep_until_wall(start_wall + spec.warmup_s + spec.duration_s)
            if at_window_end is not None:
                at_window_end()
            timeout = spec.drain_timeout_s + 30
        done = workers.collect("done", timeout)
        finished = [r for _, r in sorted(done.items()) if r is not None]
        window = spec.duration_s
        if spec.mode == "instances":
            if while_holding is not None:
                while_holding()
            window = max(w.elapsed_s for w in finished) or 1.0
        workers.broadcast("release")
        return PhaseResult(spec=spec, processes=processes, workers=finished, window_s=window)
    finally:
        workers.stop()


def _sleep_until_wall(when: float) -> None:
    delay = when - time.time()
    if delay > 0:
        time.sleep(delay)


# -- the ceiling ---------------------------------------------------------------------------------


def _canned(api_key: ApiKey, version: int, response: object) -> tuple[bytes, bytes]:
    frame = encode_response(0, api_key, version, response)  # type: ignore[arg-type]
    return frame[:4], frame[8:]


class _CannedAnswers:
    """The ceiling's responses: canned bytes with the request's correlation id spliced in."""

    def __init__(self) -> None:
        self._push = _canned(ApiKey.PUSH_TELEMETRY, 0, PushTelemetryResponse())
        self._versions = {
            v: _canned(ApiKey.API_VERSIONS, v, api_versions_response()) for v in range(4)
        }

    def answer(self, frame: bytes) -> bytes | None:
        """The response to one request frame; ``None`` for a request the ceiling does not serve."""
        api_key, version, correlation_id = _REQUEST_HEAD.unpack_from(frame, 0)
        if api_key == ApiKey.PUSH_TELEMETRY:
            head, tail = self._push
        elif api_key == ApiKey.API_VERSIONS:
            head, tail = self._versions[min(version, 3)]
        elif api_key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS:
            return _subscription_answer(correlation_id)
        else:
            return None
        return head + _SIZE.pack(correlation_id) + tail


def _subscription_answer(correlation_id: int) -> bytes:
    response = GetTelemetrySubscriptionsResponse(
        client_instance_id=uuid.uuid4(),
        subscription_id=1,
        accepted_compression_types=(4, 3, 1, 2),
        push_interval_ms=100,
        telemetry_max_bytes=1_048_576,
        delta_temporality=True,
        requested_metrics=("*",),
    )
    return encode_response(correlation_id, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, response)


class _CeilingConnection(asyncio.Protocol):
    """One ceiling connection: kip714's framing (one buffer, frames copied out), no other work."""

    def __init__(self, answers: _CannedAnswers) -> None:
        self._answers = answers
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self._transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        assert transport is not None
        buffer = self._buffer
        buffer += data
        while len(buffer) >= _SIZE.size:
            (size,) = _SIZE.unpack_from(buffer)
            end = _SIZE.size + size
            if size < _REQUEST_HEAD.size:
                transport.close()
                return
            if len(buffer) < end:
                return
            frame = bytes(buffer[_SIZE.size : end])
            del buffer[:end]
            response = self._answers.answer(frame)
            if response is None:
                transport.close()
                return
            transport.write(response)


async def _bare_server(host: str, ready: multiprocessing.Queue[int]) -> int:
    """Serve until the process is terminated; an exit status, as ``run_event_loop`` expects."""
    answers = _CannedAnswers()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _CeilingConnection(answers), host, 0)
    ready.put(int(server.sockets[0].getsockname()[1]))
    async with server:
        await server.serve_forever()
    return 0


def bare_server_main(host: str, ready: multiprocessing.Queue[int]) -> None:
    """Entry point of the ceiling server process; stop it with SIGTERM.

    The event loop is chosen as ``kip714 serve`` chooses it (uvloop where it
    is installed), so the ceiling and the server share loop and transport.
    """
    # Only the ceiling's process needs the server's command module.
    from telemetry.cli.main import run_event_loop  # noqa: PLC0415

    run_event_loop(_bare_server(host, ready))


def start_bare_server(host: str = "127.0.0.1") -> tuple[SpawnProcess, int]:
    """Start the ceiling server in its own process; returns it and its port."""
    ctx = multiprocessing.get_context("spawn")
    ready: multiprocessing.Queue[int] = ctx.Queue()
    proc = ctx.Process(target=bare_server_main, args=(host, ready), name="bare-server", daemon=True)
    proc.start()
    try:
        port = ready.get(timeout=30)
    except queue.Empty:
        proc.terminate()
        proc.join(timeout=3)
        raise RuntimeError("the bare server did not start") from None
    return proc, port


def scrape_metrics(host: str, port: int) -> dict[str, float]:
    """``GET /metrics`` as ``{'name{labels}': value}`` (simple Prometheus text parsing)."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        body = connection.getresponse().read().decode()
    finally:
        connection.close()
    values: dict[str, float] = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                values[name] = float(value)
    return values
