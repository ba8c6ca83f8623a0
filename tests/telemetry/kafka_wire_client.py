"""Test support for the Kafka listener: a running server in-process and a raw wire client.

:func:`running_server` starts a real :class:`KafkaListener` on 127.0.0.1 (port 0)
with a real :class:`IngestLog` in a temporary directory; :class:`WireClient`
speaks the Kafka protocol over a real TCP socket with the project's codec, so
the tests exercise the listener exactly as a client sees it. Every read is
bounded by :data:`IO_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import struct
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import cramjam
import lz4.frame
import zstandard
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)

from telemetry.core.codecs import CompressionType
from telemetry.core.manager import TelemetryManager
from telemetry.core.settings import TelemetryConfig
from telemetry.enforcement import Enforcement
from telemetry.errors import ErrorCode
from telemetry.ingest import IngestLog, LogConfig
from telemetry.kafka.listener import KafkaListener
from telemetry.kafka.settings import KafkaListenerConfig
from telemetry.wire import (
    SIZE_PREFIX,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    MetadataRequest,
    MetadataResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
    Request,
    RequestHeader,
    Response,
    decode_response,
    encode_request,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping
    from pathlib import Path

    from exporters.api import LoggedPush

IO_TIMEOUT_S = 5.0
"""The longest any single read from the listener may take."""

T0_MS = 1_700_000_000_000
"""Start of :class:`ManualClock`: a wall-clock-like epoch (instance timestamps start at 0)."""

LOOPBACK = "127.0.0.1"
ZERO_ID = uuid.UUID(int=0)
ONE_ID = uuid.UUID(int=1)
SOFTWARE_NAME = "kip714-wire-test"
SOFTWARE_VERSION = "0.0.1"

_ResponseT = TypeVar("_ResponseT", bound=Response)


class ManualClock:
    """The listener's clock, moved only by the test: interval gates become exact."""

    def __init__(self, now_ms: int = T0_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, delta_ms: int) -> None:
        self.now_ms += delta_ms


@dataclass(slots=True)
class Server:
    """A started listener and what it writes to."""

    listener: KafkaListener
    manager: TelemetryManager
    log: IngestLog
    host: str
    port: int
    clock: ManualClock | None = None

    async def pushes(self) -> list[LoggedPush]:
        """Every push in the log (bounded: test logs are small)."""
        start = self.log.log_start
        return await asyncio.to_thread(self.log.read, start, 10_000, 256 * 1024 * 1024)

    async def wait_for_pushes(
        self, predicate: Callable[[list[LoggedPush]], bool], timeout_s: float
    ) -> list[LoggedPush]:
        """Poll the log until ``predicate`` holds or ``timeout_s`` passes; return the log."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            pushes = await self.pushes()
            if predicate(pushes) or loop.time() >= deadline:
                return pushes
            await asyncio.sleep(0.02)

    async def connect(self, client_id: str | None = "kip714-wire-test") -> WireClient:
        return await WireClient.connect(self.host, self.port, client_id)

    async def wait_idle(self, timeout_s: float = IO_TIMEOUT_S) -> int:
        """Wait (bounded) until the listener has no open connection; return how many are open."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.listener.stats.connections_open and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return self.listener.stats.connections_open


@contextlib.asynccontextmanager
async def running_server(
    directory: Path,
    *,
    telemetry: TelemetryConfig | None = None,
    log_config: LogConfig | None = None,
    clock: ManualClock | None = None,
    subscription: Mapping[str, object] | None = None,
    max_frame_bytes: int = 1024 * 1024,
    advertised_host: str | None = None,
    advertised_port: int | None = None,
    enforcement: Enforcement | None = None,
) -> AsyncIterator[Server]:
    """Start manager, ingest log and listener on 127.0.0.1:0; close all on exit.

    ``subscription`` (default: all metrics every 300 ms) is registered as "all";
    ``enforcement`` defaults to no quotas and the default limits.
    """
    manager = TelemetryManager(telemetry or TelemetryConfig())
    manager.update_subscription("all", dict(subscription or {"metrics": "*", "interval.ms": "300"}))
    log = await IngestLog.open(
        directory / "ingest",
        log_config or LogConfig(segment_bytes=1024 * 1024, max_bytes=16 * 1024 * 1024),
    )
    config = KafkaListenerConfig(
        host=LOOPBACK,
        port=0,
        max_frame_bytes=max_frame_bytes,
        advertised_host=advertised_host,
        advertised_port=advertised_port,
    )
    listener = (
        KafkaListener(config, manager, log, enforcement=enforcement)
        if clock is None
        else KafkaListener(config, manager, log, clock=clock, enforcement=enforcement)
    )
    try:
        host, port = await listener.start()
        yield Server(listener, manager, log, host, port, clock)
    finally:
        await listener.close()
        await log.close()


class WireClient:
    """A Kafka client reduced to its wire: encode, send, read a frame, decode."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str | None
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self._correlation_id = 0

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str | None) -> WireClient:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), IO_TIMEOUT_S)
        return cls(reader, writer, client_id)

    def frame(self, api_key: int, version: int, request: Request) -> tuple[int, bytes]:
        """The next correlation id and the encoded frame (size prefix included)."""
        self._correlation_id += 1
        header = RequestHeader(
            api_key=api_key,
            api_version=version,
            correlation_id=self._correlation_id,
            client_id=self.client_id,
        )
        return self._correlation_id, encode_request(header, request)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self) -> bytes:
        """One response frame without its size prefix."""
        prefix = await asyncio.wait_for(self.reader.readexactly(SIZE_PREFIX.size), IO_TIMEOUT_S)
        (size,) = SIZE_PREFIX.unpack(prefix)
        return await asyncio.wait_for(self.reader.readexactly(size), IO_TIMEOUT_S)

    async def receive(
        self, api_key: int, version: int, kind: type[_ResponseT]
    ) -> tuple[int, _ResponseT]:
        correlation_id, response = decode_response(await self.read_frame(), api_key, version)
        assert isinstance(response, kind), response
        return correlation_id, response

    async def call(
        self, api_key: int, version: int, request: Request, kind: type[_ResponseT]
    ) -> _ResponseT:
        correlation_id, data = self.frame(api_key, version, request)
        await self.write(data)
        answered, response = await self.receive(api_key, version, kind)
        assert answered == correlation_id
        return response

    async def api_versions(
        self, version: int = 3, name: str = SOFTWARE_NAME, software_version: str = SOFTWARE_VERSION
    ) -> ApiVersionsResponse:
        request = ApiVersionsRequest(
            client_software_name=name, client_software_version=software_version
        )
        return await self.call(ApiKey.API_VERSIONS, version, request, ApiVersionsResponse)

    async def metadata(self, version: int = 12) -> MetadataResponse:
        request = MetadataRequest(topics=None if version == 0 else ())
        return await self.call(ApiKey.METADATA, version, request, MetadataResponse)

    async def get_subscriptions(
        self, client_instance_id: uuid.UUID = ZERO_ID
    ) -> GetTelemetrySubscriptionsResponse:
        request = GetTelemetrySubscriptionsRequest(client_instance_id=client_instance_id)
        return await self.call(
            ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, request, GetTelemetrySubscriptionsResponse
        )

    async def push(
        self,
        client_instance_id: uuid.UUID,
        subscription_id: int,
        metrics: bytes | None,
        compression_type: int = CompressionType.NONE,
        *,
        terminating: bool = False,
    ) -> PushTelemetryResponse:
        """``metrics=None`` sends a null Metrics field (old librdkafka)."""
        request = PushTelemetryRequest(
            client_instance_id=client_instance_id,
            subscription_id=subscription_id,
            terminating=terminating,
            compression_type=int(compression_type),
            metrics=metrics or b"",
            metrics_was_null=metrics is None,
        )
        return await self.call(ApiKey.PUSH_TELEMETRY, 0, request, PushTelemetryResponse)

    async def subscribe(self) -> GetTelemetrySubscriptionsResponse:
        """A fresh instance: GET with the zero id, which must succeed."""
        answer = await self.get_subscriptions()
        assert answer.error_code == ErrorCode.NONE, answer
        return answer

    async def closed_by_server(self) -> bool:
        """Whether the server closes the connection within the timeout (drains what it sends)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + IO_TIMEOUT_S
        try:
            while loop.time() < deadline:
                chunk = await asyncio.wait_for(
                    self.reader.read(65536), max(0.0, deadline - loop.time())
                )
                if not chunk:
                    return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        return False

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


def raw_header(
    api_key: int, version: int, correlation_id: int, client_id: bytes = b"raw", *, tags: bool
) -> bytes:
    """A request header written by hand (for versions and keys the codec refuses)."""
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return header + (b"\x00" if tags else b"")


def sized(body: bytes) -> bytes:
    return SIZE_PREFIX.pack(len(body)) + body


async def serves_telemetry(server: Server, payload: bytes | None = None) -> bool:
    """A fresh connection does ApiVersions, GET and PUSH and the push lands in the log."""
    data = payload or otlp_payload("org.apache.kafka.survivor.check")
    before = len(await server.pushes())
    client = await server.connect("survivor")
    try:
        versions = await client.api_versions()
        subscription = await client.subscribe()
        pushed = await client.push(
            subscription.client_instance_id, subscription.subscription_id, data
        )
    finally:
        await client.close()
    after = await server.pushes()
    return (
        versions.error_code == ErrorCode.NONE
        and pushed.error_code == ErrorCode.NONE
        and len(after) == before + 1
        and after[-1].payload == data
        and after[-1].client_id == "survivor"
    )


async def fresh_push(
    address: tuple[str, int], client_id: str, points: int = 1
) -> PushTelemetryResponse:
    """A fresh client instance of ``client_id`` at ``address``: GET, then one push."""
    client = await WireClient.connect(*address, client_id)
    try:
        subscribed = await client.subscribe()
        return await client.push(
            subscribed.client_instance_id,
            subscribed.subscription_id,
            otlp_payload("org.apache.kafka.producer.bytes", points=points),
        )
    finally:
        await client.close()


def otlp_payload(name: str, points: int = 1, scope: str = "kip714-test") -> bytes:
    """A real OTLP ``MetricsData`` encoding with ``points`` gauge metrics named ``name``."""
    metrics = [
        Metric(
            name=name,
            description=f"test metric {index}",
            gauge=Gauge(
                data_points=[NumberDataPoint(time_unix_nano=T0_MS * 1_000_000, as_int=index)]
            ),
        )
        for index in range(points)
    ]
    data = MetricsData(
        resource_metrics=[
            ResourceMetrics(
                scope_metrics=[
                    ScopeMetrics(scope=InstrumentationScope(name=scope), metrics=metrics)
                ]
            )
        ]
    )
    return bytes(data.SerializeToString())


def metric_names(payload: bytes) -> list[str]:
    data = MetricsData.FromString(payload)
    return [
        metric.name
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    ]


def xerial_snappy(data: bytes, block_size: int = 512) -> bytes:
    """snappy-java's framing, as Java clients send it: magic, versions, (length, block)*."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), block_size):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + block_size]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


def zstd_stream(data: bytes) -> bytes:
    """A zstd frame without a content size, as librdkafka writes it."""
    compressor = zstandard.ZstdCompressor().compressobj()
    return bytes(compressor.compress(data) + compressor.flush())


def zstd_declaring(content_size: int, produced: int) -> bytes:
    """A zstd frame declaring ``content_size`` whose RLE blocks produce ``produced`` bytes.

    Written by hand so a frame claiming a GiB costs nothing to build: a header
    with an 8-byte content size and a 2 MiB window (not single-segment), then
    4-byte RLE blocks of up to 128 KiB of zeros each (32 KiB for a GiB).
    """
    rle_block = 128 * 1024  # zstd's largest block
    header = (0xFD2FB528).to_bytes(4, "little") + bytes([0xC0, 11 << 3])
    out = bytearray(header + content_size.to_bytes(8, "little"))
    left = produced
    while True:
        size = min(left, rle_block)
        left -= size
        last = 1 if left == 0 else 0
        out += ((size << 3) | (1 << 1) | last).to_bytes(3, "little") + b"\x00"
        if last:
            return bytes(out)


COMPRESSORS: dict[str, tuple[CompressionType, Callable[[bytes], bytes]]] = {
    "none": (CompressionType.NONE, bytes),
    "gzip": (CompressionType.GZIP, gzip.compress),
    "gzip-level0": (CompressionType.GZIP, lambda data: gzip.compress(data, compresslevel=0)),
    "snappy-raw": (CompressionType.SNAPPY, lambda data: bytes(cramjam.snappy.compress_raw(data))),
    "snappy-xerial": (CompressionType.SNAPPY, xerial_snappy),
    "lz4": (CompressionType.LZ4, lz4.frame.compress),
    "zstd": (CompressionType.ZSTD, zstd_stream),
}
"""Every codec a client may use, with the framing variants real clients send."""
