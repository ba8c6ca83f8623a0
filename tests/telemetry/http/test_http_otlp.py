"""``POST /v1/metrics`` over real HTTP: OTLP protobuf and JSON in, the ingest log out.

The golden JSON payload ``data/otlp_metrics_example.json`` is the metrics
example of the OTLP specification (opentelemetry-proto
``examples/metrics.json``, Apache-2.0), unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import threading
import tracemalloc
import uuid
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cramjam
import lz4.frame
import pytest
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from telemetry.core.client_uuid import Uuid
from telemetry.core.settings import TelemetryConfig
from telemetry.http.identity import OTLP_INSTANCE_NAMESPACE
from telemetry.http.otlp import INLINE_BYTES
from telemetry.ingest import LogConfig
from telemetry.wire.primitives import Writer
from tests.telemetry.http_support import HttpServer, running_http
from tests.telemetry.kafka_wire_client import T0_MS, ManualClock, running_server, zstd_stream

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

ROUTE = "/v1/metrics"
PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
MAX_BYTES = 64 * 1024
MAX_DECOMPRESSED = 256 * 1024
EXAMPLE = Path(__file__).parents[1] / "data" / "otlp_metrics_example.json"
SDK_RESOURCE = {
    "service.name": "checkout",
    "service.namespace": "shop",
    "service.instance.id": "627cc493-f310-47de-96bd-71410b7dec09",
    "telemetry.sdk.name": "opentelemetry",
    "telemetry.sdk.language": "python",
    "telemetry.sdk.version": "1.45.2",
}


def resource_metrics(attributes: dict[str, str], name: str, points: int = 3) -> ResourceMetrics:
    return ResourceMetrics(
        resource=Resource(
            attributes=[
                KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attributes.items()
            ]
        ),
        scope_metrics=[
            ScopeMetrics(
                metrics=[
                    Metric(
                        name=name,
                        gauge=Gauge(
                            data_points=[
                                NumberDataPoint(time_unix_nano=T0_MS * 1_000_000, as_int=index)
                                for index in range(points)
                            ]
                        ),
                    )
                ]
            )
        ],
    )


def otlp_request(*resources: ResourceMetrics) -> bytes:
    return bytes(ExportMetricsServiceRequest(resource_metrics=resources).SerializeToString())


SDK_BODY = otlp_request(resource_metrics(SDK_RESOURCE, "app.requests"))


def expected_instance_id(*parts: str) -> str:
    """The documented rule, computed independently of the server's code."""
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, "urn:kip714:otlp")
    assert namespace == OTLP_INSTANCE_NAMESPACE
    return str(Uuid.from_bytes(uuid.uuid5(namespace, "\x00".join(parts)).bytes))


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[HttpServer]:
    telemetry = TelemetryConfig(max_bytes=MAX_BYTES, max_decompressed_bytes=MAX_DECOMPRESSED)
    async with (
        running_server(tmp_path, telemetry=telemetry, clock=ManualClock()) as kafka,
        running_http(kafka) as http,
    ):
        yield http


async def post(
    server: HttpServer, body: bytes | Any, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    async with server.session.post(server.url + ROUTE, data=body, headers=headers) as response:
        return response.status, dict(response.headers), await response.read()


async def test_an_sdk_request_is_logged_as_sent_with_its_derived_identity(
    server: HttpServer,
) -> None:
    status, headers, body = await post(server, SDK_BODY, PROTOBUF)
    assert status == 200
    assert headers["Content-Type"] == "application/x-protobuf"
    answer = ExportMetricsServiceResponse.FromString(body)
    assert not answer.HasField("partial_success")
    [logged] = await server.pushes()
    assert logged.payload == SDK_BODY  # the MetricsData encoding is the request's
    assert [r.resource for r in MetricsData.FromString(logged.payload).resource_metrics] == [
        r.resource for r in ExportMetricsServiceRequest.FromString(SDK_BODY).resource_metrics
    ]
    assert logged.client_instance_id == expected_instance_id(
        "service.instance.id", "shop", "checkout", "627cc493-f310-47de-96bd-71410b7dec09"
    )
    assert logged.client_id == "checkout"
    assert (logged.client_software_name, logged.client_software_version) == (
        "opentelemetry-python",
        "1.45.2",
    )
    assert logged.client_source_address == "127.0.0.1"
    assert logged.client_source_port is not None and logged.client_source_port > 0
    assert logged.principal == "User:ANONYMOUS"
    assert logged.received_time_ms == T0_MS
    assert (logged.subscription_id, logged.push_interval_ms, logged.terminating) == (0, 0, False)
    assert logged.content_type == "OTLP"
    # OTLP senders are not KIP-714 instances.
    assert server.manager.instance_count == 0


async def test_each_request_is_logged_with_its_own_connections_source_port(
    server: HttpServer,
) -> None:
    """The source address is read once per connection: never another connection's."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    head = (
        f"POST {ROUTE} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Length: {len(SDK_BODY)}\r\n\r\n"
    ).encode()
    connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for _ in range(2):  # opened inside the try: a failed second open closes the first
            connections.append(await asyncio.open_connection(host, int(port)))
        sent_from: list[int] = []
        for _ in range(2):  # two requests on each kept-alive connection, interleaved
            for reader, writer in connections:
                writer.write(head + SDK_BODY)
                status_line = await asyncio.wait_for(reader.readline(), 10)
                assert status_line.startswith(b"HTTP/1.1 200 ")
                length = 0
                while (line := await asyncio.wait_for(reader.readline(), 10)) != b"\r\n":
                    name, _, value = line.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                sent_from.append(writer.get_extra_info("sockname")[1])
    finally:
        for _, writer in connections:
            writer.close()
        for _, writer in connections:
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    assert len(set(sent_from)) == 2
    logged = await server.pushes()
    assert [(p.client_source_address, p.client_source_port) for p in logged] == [
        ("127.0.0.1", sent) for sent in sent_from
    ]


async def test_without_service_instance_id_the_source_address_identifies(
    server: HttpServer,
) -> None:
    attributes = {"service.name": "batch-job"}
    first = otlp_request(resource_metrics(attributes, "a"))
    second = otlp_request(resource_metrics(attributes, "b"))
    other = otlp_request(resource_metrics({"service.name": "other-job"}, "c"))
    for body in (first, second, other):
        assert (await post(server, body, PROTOBUF))[0] == 200
    ids = [p.client_instance_id for p in await server.pushes()]
    assert ids[0] == ids[1] == expected_instance_id("source.address", "", "batch-job", "127.0.0.1")
    assert ids[2] != ids[0]


async def test_resources_of_several_identities_are_logged_as_one_push_each(
    server: HttpServer,
) -> None:
    orders = {"service.name": "orders", "service.instance.id": "1"}
    billing = {"service.name": "billing", "service.instance.id": "1"}
    body = otlp_request(
        resource_metrics(orders, "orders.a", 2),
        resource_metrics(billing, "billing.a", 1),
        resource_metrics(orders, "orders.b", 4),
    )
    assert (await post(server, body, PROTOBUF))[0] == 200
    logged = await server.pushes()
    names = {
        p.client_id: [
            m.name
            for r in MetricsData.FromString(p.payload).resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
        ]
        for p in logged
    }
    assert names == {"orders": ["orders.a", "orders.b"], "billing": ["billing.a"]}


async def test_an_empty_request_succeeds_and_logs_nothing(server: HttpServer) -> None:
    status, _, body = await post(server, b"", PROTOBUF)
    assert (status, body) == (200, b"")
    status, headers, body = await post(server, b"{}", JSON)
    assert (status, headers["Content-Type"], json.loads(body)) == (200, "application/json", {})
    assert await server.pushes() == []


async def test_the_specifications_json_example_lands_as_its_protobuf(server: HttpServer) -> None:
    example = EXAMPLE.read_bytes()
    status, headers, body = await post(server, example, JSON)
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {}
    [logged] = await server.pushes()
    expected = json_format.Parse(example, MetricsData())
    assert MetricsData.FromString(logged.payload) == expected
    metrics = expected.resource_metrics[0].scope_metrics[0].metrics
    assert [m.name for m in metrics] == ["my.counter", "my.gauge", "my.histogram"]
    assert metrics[0].sum.data_points[0].time_unix_nano == 1544712660300000000
    assert list(metrics[2].histogram.data_points[0].bucket_counts) == [1, 1]
    assert logged.client_id == "my.service"
    assert logged.client_instance_id == expected_instance_id(
        "source.address", "", "my.service", "127.0.0.1"
    )


async def test_json_follows_the_otlp_deviations(server: HttpServer) -> None:
    trace_id, span_id = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
    document = {
        "resourceMetrics": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]
                },
                "scopeMetrics": [
                    {
                        "metrics": [
                            {
                                "name": "big",
                                "sum": {
                                    "aggregationTemporality": 2,  # an enum as an integer
                                    "isMonotonic": True,
                                    "dataPoints": [
                                        {"asInt": "9007199254740993", "timeUnixNano": "1"},
                                        {"asInt": 5, "timeUnixNano": 1544712660300000000},
                                    ],
                                },
                                "aNewerField": {"ignored": True},
                            },
                            {
                                "name": "with_exemplar",
                                "gauge": {
                                    "data_points": [  # the original field name is read too
                                        {
                                            "asDouble": 1.5,
                                            "exemplars": [
                                                {
                                                    "asDouble": 1.5,
                                                    "traceId": trace_id,
                                                    "spanId": span_id,
                                                }
                                            ],
                                        }
                                    ]
                                },
                            },
                        ]
                    }
                ],
            }
        ]
    }
    status, _, body = await post(server, json.dumps(document).encode(), JSON)
    assert status == 200, body
    [logged] = await server.pushes()
    big, with_exemplar = (
        MetricsData.FromString(logged.payload).resource_metrics[0].scope_metrics[0].metrics
    )
    assert [p.as_int for p in big.sum.data_points] == [9007199254740993, 5]
    assert big.sum.aggregation_temporality == 2
    exemplar = with_exemplar.gauge.data_points[0].exemplars[0]
    assert (exemplar.trace_id.hex(), exemplar.span_id.hex()) == (trace_id, span_id)


def snappy_framed(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress(data))


ENCODINGS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": ("gzip", gzip.compress),
    "deflate": ("deflate", zlib.compress),  # what the OTel Python SDK sends
    "deflate-raw": ("deflate", lambda data: zlib.compress(data, wbits=-15)),
    "zlib": ("zlib", zlib.compress),
    "zstd": ("zstd", zstd_stream),
    "lz4": ("lz4", lz4.frame.compress),
    "snappy": ("snappy", lambda data: bytes(cramjam.snappy.compress_raw(data))),
    "snappy-framed": ("snappy", snappy_framed),
    "x-snappy-framed": ("x-snappy-framed", snappy_framed),
    "identity": ("identity", bytes),
}


#: The encodings Kafka has a compression id for: such a body is logged as sent.
LOGGED_AS_SENT = {"gzip", "zstd", "lz4", "snappy", "identity"}


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
async def test_every_collector_encoding_is_decoded(server: HttpServer, encoding: str) -> None:
    big = otlp_request(resource_metrics(SDK_RESOURCE, "app.requests", points=5000))
    assert MAX_BYTES < len(big) < MAX_DECOMPRESSED  # only fits compressed
    name, compress = ENCODINGS[encoding]
    sent = SDK_BODY if encoding == "identity" else big
    encoded = compress(sent)
    status, _, body = await post(server, encoded, {**PROTOBUF, "Content-Encoding": name})
    assert status == 200, body
    segments = b"".join(p.read_bytes() for p in sorted(server.log.directory.glob("*.log")))
    if encoding in LOGGED_AS_SENT:
        assert encoded in segments
        assert encoding == "identity" or len(segments) < len(sent)
    else:  # deflate, framed snappy: no Kafka id, so the decoded body is logged
        assert sent in segments
    [logged] = await server.pushes()
    assert logged.payload == sent


def status_of(body: bytes, is_json: bool) -> Status:
    status = Status()
    if is_json:
        json_format.Parse(body, status)
    else:
        status.ParseFromString(body)
    return status


ZEROS = bytes(4 * 1024 * 1024)
# Snappy compresses at most ~21:1, so its bomb is smaller to stay under MAX_BYTES.
SNAPPY_BOMB = snappy_framed(bytes(1024 * 1024))
BOMB = f"the limit of {MAX_DECOMPRESSED} bytes"


def length_delimited(number: int, value: bytes) -> bytes:
    """One protobuf field of wire type 2 (LEN): tag, length, bytes.

    Kafka's unsigned varint is protobuf's base-128 varint, so the wire
    module's writer encodes the tag and the length.
    """
    writer = Writer()
    writer.uvarint(number << 3 | 2)
    writer.uvarint(len(value))
    return writer.getvalue() + value


def sdk_resource() -> bytes:
    attributes = [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in SDK_RESOURCE.items()]
    return bytes(Resource(attributes=attributes).SerializeToString())


#: Field 17 as LEN, then a length past the end: no protobuf decoder reads it.
NOT_A_SCOPE = b"\x8a\xff not a ScopeMetrics"


async def test_metrics_are_logged_as_sent_and_left_to_the_landing_to_decode(
    server: HttpServer,
) -> None:
    """Only the resources are decoded on the request path (telemetry.http.otlp_wire)."""
    body = length_delimited(
        1, length_delimited(1, sdk_resource()) + length_delimited(2, NOT_A_SCOPE)
    )
    with pytest.raises(DecodeError):
        MetricsData.FromString(body)  # what the landing meets: it skips and counts the push
    status, _, answer = await post(server, body, PROTOBUF)
    assert status == 200
    assert not ExportMetricsServiceResponse.FromString(answer).HasField("partial_success")
    [logged] = await server.pushes()
    assert logged.payload == body
    assert (logged.client_id, logged.client_software_name) == ("checkout", "opentelemetry-python")


async def test_a_resource_that_does_not_decode_refuses_the_whole_request(
    server: HttpServer,
) -> None:
    # service.name's key made invalid UTF-8, which proto3 strings may not hold
    broken = sdk_resource().replace(b"service.name", b"service\xffname")
    good = resource_metrics({"service.name": "good"}, "g")
    body = otlp_request(good) + length_delimited(1, length_delimited(1, broken))
    status, headers, answer = await post(server, body, PROTOBUF)
    assert status == 400
    assert headers["Content-Type"] == "application/x-protobuf"
    refusal = Status.FromString(answer)
    assert refusal.code == 3
    assert "a resource does not decode" in refusal.message
    assert await server.pushes() == []


async def test_a_resource_sent_in_two_parts_lands_with_the_identity_of_both(
    server: HttpServer,
) -> None:
    """Protobuf merges a message field sent twice; the identity is the merged resource's."""
    first, second = (
        bytes(
            Resource(
                attributes=[KeyValue(key=k, value=AnyValue(string_value=v))]
            ).SerializeToString()
        )
        for k, v in (("service.name", "split"), ("service.instance.id", "7"))
    )
    body = length_delimited(1, length_delimited(1, first) + length_delimited(1, second))
    status, _, _ = await post(server, body, PROTOBUF)
    assert status == 200
    [logged] = await server.pushes()
    assert logged.client_id == "split"
    assert logged.client_instance_id == expected_instance_id(
        "service.instance.id", "", "split", "7"
    )


@pytest.mark.parametrize(
    ("body", "headers", "status", "code", "message"),
    [
        (b"\xff\xff\xff", PROTOBUF, 400, 3, "invalid OTLP protobuf"),
        (b"{not json", JSON, 400, 3, "invalid OTLP/JSON"),
        (b"[]", JSON, 400, 3, "JSON object"),
        (b'{"resourceMetrics": 5}', JSON, 400, 3, "invalid OTLP/JSON"),
        (
            b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"gauge":{"dataPoints":'
            b'[{"exemplars":[{"traceId":"xyz"}]}]}}]}]}]}',
            JSON,
            400,
            3,
            "traceId is not hex",
        ),
        (gzip.compress(SDK_BODY)[:20], {**PROTOBUF, "Content-Encoding": "gzip"}, 400, 3, "gzip"),
        (b"\x78\x9c\xff\xff", {**JSON, "Content-Encoding": "deflate"}, 400, 3, "deflate"),
        (
            snappy_framed(SDK_BODY)[:14] + b"\x00\x00\x00\x00" + snappy_framed(SDK_BODY)[18:],
            {**PROTOBUF, "Content-Encoding": "snappy"},
            400,
            3,
            "snappy",
        ),
        (bytes(MAX_BYTES + 1), PROTOBUF, 413, 8, f"exceeds {MAX_BYTES} bytes"),
        (gzip.compress(ZEROS), {**PROTOBUF, "Content-Encoding": "gzip"}, 413, 8, BOMB),
        (zlib.compress(ZEROS), {**JSON, "Content-Encoding": "deflate"}, 413, 8, BOMB),
        (SNAPPY_BOMB, {**PROTOBUF, "Content-Encoding": "snappy"}, 413, 8, BOMB),
        (SDK_BODY, {**PROTOBUF, "Content-Encoding": "br"}, 415, 12, "Content-Encoding"),
        (SDK_BODY, {**JSON, "Content-Encoding": "gzip, zstd"}, 415, 12, "Content-Encoding"),
    ],
    ids=[
        "protobuf-garbage",
        "json-garbage",
        "json-not-object",
        "json-wrong-shape",
        "json-bad-hex-id",
        "gzip-truncated",
        "deflate-corrupt",
        "snappy-framed-crc",
        "too-large-as-sent",
        "gzip-bomb",
        "deflate-bomb",
        "snappy-framed-bomb",
        "unknown-encoding",
        "encoding-list",
    ],
)
async def test_refusals_carry_a_status_in_the_requests_content_type(
    server: HttpServer,
    body: bytes,
    headers: dict[str, str],
    status: int,
    code: int,
    message: str,
) -> None:
    answered, answer_headers, answer = await post(server, body, headers)
    is_json = headers["Content-Type"] == "application/json"
    assert answered == status
    assert answer_headers["Content-Type"] == headers["Content-Type"]
    refusal = status_of(answer, is_json)
    assert refusal.code == code
    assert message in refusal.message
    assert "Retry-After" not in answer_headers  # not retryable
    assert await server.pushes() == []


async def test_a_chunked_body_is_refused_once_it_passes_the_limit(server: HttpServer) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(64):  # 4 MiB offered, no Content-Length
            sent += 64 * 1024
            yield bytes(64 * 1024)

    status, _, body = await post(server, chunks(), PROTOBUF)
    assert status == 413
    assert Status.FromString(body).code == 8


async def test_decompression_bombs_cost_memory_bounded_by_the_limit(server: HttpServer) -> None:
    """A 4 MiB-inflating body never makes the server hold more than the decoded limit."""
    bombs = [
        ("gzip", gzip.compress(ZEROS)),
        ("deflate", zlib.compress(ZEROS)),
        ("zstd", zstd_stream(ZEROS)),
        ("lz4", lz4.frame.compress(ZEROS)),
        ("snappy", SNAPPY_BOMB),
    ]
    tracemalloc.start()
    try:
        for encoding, bomb in bombs:
            assert len(bomb) <= MAX_BYTES
            tracemalloc.reset_peak()
            status, _, _ = await post(server, bomb, {**PROTOBUF, "Content-Encoding": encoding})
            _, peak = tracemalloc.get_traced_memory()
            assert status == 413, encoding
            assert peak < 3 * MAX_DECOMPRESSED + 4 * MAX_BYTES, (encoding, peak)
    finally:
        tracemalloc.stop()


async def test_another_content_type_is_415_in_plain_text(server: HttpServer) -> None:
    status, headers, body = await post(server, SDK_BODY, {"Content-Type": "text/plain"})
    assert status == 415
    assert headers["Content-Type"].startswith("text/plain")
    assert b"application/x-protobuf" in body


async def test_only_post_is_served(server: HttpServer) -> None:
    async with server.session.get(server.url + ROUTE) as response:
        assert response.status == 405


async def test_a_full_log_is_503_with_retry_after(tmp_path: Path) -> None:
    log_config = LogConfig(segment_bytes=4096, max_bytes=8192, full_throttle_ms=1500)
    body = otlp_request(resource_metrics(SDK_RESOURCE, "filler", points=60))
    assert 1000 < len(body) < 2000
    async with (
        running_server(tmp_path, log_config=log_config) as kafka,
        running_http(kafka) as server,
    ):
        await server.log.register("stuck-exporter")  # holds back retention
        statuses = []
        for _ in range(12):  # the budget holds about five of these
            status, headers, answer = await post(server, body, PROTOBUF)
            statuses.append(status)
            if status != 200:
                break
        logged = await server.pushes()
    *accepted, refused = statuses
    assert accepted and set(accepted) == {200}
    assert (refused, headers["Retry-After"]) == (503, "2")
    assert Status.FromString(answer).code == 14
    assert len(logged) == len(accepted)


async def test_a_closed_log_is_503(tmp_path: Path) -> None:
    async with running_server(tmp_path) as kafka, running_http(kafka) as server:
        await server.log.close()
        status, headers, body = await post(server, json.dumps({"resourceMetrics": [
            json_format.MessageToDict(resource_metrics(SDK_RESOURCE, "late"))
        ]}).encode(), JSON)  # fmt: skip
    assert (status, headers["Retry-After"]) == (503, "1")
    assert json.loads(body)["code"] == 14


async def test_a_resource_too_large_for_the_log_is_a_partial_success(tmp_path: Path) -> None:
    log_config = LogConfig(segment_bytes=64 * 1024, max_bytes=1024 * 1024, max_record_bytes=2048)
    small = resource_metrics({"service.name": "small", "service.instance.id": "1"}, "s", 2)
    large = resource_metrics({"service.name": "large", "service.instance.id": "1"}, "l", 200)
    async with (
        running_server(tmp_path, log_config=log_config) as kafka,
        running_http(kafka) as server,
    ):
        status, _, body = await post(server, otlp_request(small, large), PROTOBUF)
        alone, _, refusal = await post(server, otlp_request(large), PROTOBUF)
        logged = await server.pushes()
    assert status == 200
    partial = ExportMetricsServiceResponse.FromString(body).partial_success
    assert partial.rejected_data_points == 200
    assert "1 of 2 resources were not logged" in partial.error_message
    assert [p.client_id for p in logged] == ["small"]
    assert alone == 413
    assert Status.FromString(refusal).code == 8


async def test_a_big_json_body_is_parsed_off_the_event_loop(tmp_path: Path) -> None:
    """OTLP/JSON costs about 1 µs a byte to parse: a big body must not stall other senders.

    A small request sent while the big one is being parsed is answered first.
    """
    resources = [resource_metrics({"service.name": "big"}, f"m{i}", 40) for i in range(600)]
    document = json.dumps(
        json_format.MessageToDict(ExportMetricsServiceRequest(resource_metrics=resources))
    ).encode()
    big = gzip.compress(document)
    limits = TelemetryConfig(max_bytes=MAX_BYTES, max_decompressed_bytes=4 * 1024 * 1024)
    assert len(big) <= MAX_BYTES and INLINE_BYTES < 1024 * 1024 < len(document) <= 4 * 1024 * 1024
    order: list[str] = []
    async with running_server(tmp_path, telemetry=limits) as kafka, running_http(kafka) as server:

        async def send(name: str, body: bytes, headers: dict[str, str]) -> None:
            status, _, _ = await post(server, body, headers)
            assert status == 200
            order.append(name)

        idle_workers = _worker_threads()
        big_request = asyncio.ensure_future(send("big", big, {**JSON, "Content-Encoding": "gzip"}))
        for _ in range(10_000):  # until the big body is being parsed (or done, if on the loop)
            if _worker_threads() > idle_workers or big_request.done():
                break
            await asyncio.sleep(0.001)
        await send("small", SDK_BODY, PROTOBUF)
        await big_request
        logged = await server.pushes()
    assert order == ["small", "big"]
    assert len(logged) == 2


async def test_a_small_json_body_is_parsed_off_the_event_loop_and_protobuf_on_it(
    server: HttpServer,
) -> None:
    """JSON's mapping is Python (about 0.3 µs a byte): even a small body goes to the thread.

    The thread pool starts its thread on its first task, so a decoding thread
    that appears with the JSON request, and not with the protobuf one, took it.
    """
    small_json = json.dumps(
        json_format.MessageToDict(ExportMetricsServiceRequest.FromString(SDK_BODY))
    ).encode()
    assert len(small_json) < INLINE_BYTES
    before = _decoding_threads()
    assert (await post(server, SDK_BODY, PROTOBUF))[0] == 200
    after_protobuf = _decoding_threads()
    assert (await post(server, small_json, JSON))[0] == 200
    after_json = _decoding_threads()
    assert not after_protobuf - before
    assert len(after_json - after_protobuf) == 1
    assert len(await server.pushes()) == 2


def _decoding_threads() -> set[threading.Thread]:
    """The decoding threads alive, as objects: an ident can be reused once a thread ends."""
    return {t for t in threading.enumerate() if t.name.startswith("otlp-decode")}


def _worker_threads() -> int:
    """The OTLP decoding threads (of every server in this process)."""
    return sum(t.name.startswith("otlp-decode") for t in threading.enumerate())


async def test_a_handler_cancelled_while_its_record_is_written_leaves_it_logged(
    tmp_path: Path,
) -> None:
    """The one-record wait awaits the log's own future: cancelling the handler cancels
    that future only, and the log still writes the record and keeps serving."""
    from telemetry.http import HttpIngest  # noqa: PLC0415
    from telemetry.http.otlp import OtlpMetricsHandler  # noqa: PLC0415
    from telemetry.ingest import PushContext  # noqa: PLC0415

    async with running_server(tmp_path) as kafka:
        handler = OtlpMetricsHandler(HttpIngest(manager=kafka.manager, log=kafka.log))
        try:
            records = [
                (
                    PushContext(
                        client_instance_id=f"cancelled-{n}",
                        subscription_id=0,
                        received_time_ms=T0_MS,
                        push_interval_ms=0,
                    ),
                    (b"payload-%d" % n, 0, 9),
                )
                for n in range(2)
            ]
            waiting = asyncio.ensure_future(handler._append(records[:1]))
            await asyncio.sleep(0)  # appended, now waiting for the fsync
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            after = await handler._append(records[1:])  # the log still takes records
        finally:
            handler.close()
        logged = await kafka.wait_for_pushes(lambda pushes: len(pushes) >= 2, 10.0)
    assert after == {}
    assert [push.client_instance_id for push in logged] == ["cancelled-0", "cancelled-1"]
    assert [push.payload for push in logged] == [b"payload-0", b"payload-1"]
