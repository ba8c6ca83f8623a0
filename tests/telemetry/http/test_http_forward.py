"""``POST /v1/telemetry/forward`` on a real server: what the plugin sends lands, nothing else."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
from typing import TYPE_CHECKING, Any

import aiohttp
import cramjam
import lz4.frame
import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from pyiceberg.catalog import load_catalog

from telemetry.core.client_uuid import Uuid
from telemetry.errors import ErrorCode
from telemetry.http.forward import FORWARD_PATH
from telemetry.http.forward_codec import (
    CONTENT_TYPE,
    ForwardFormatError,
    decode_forward_request,
)
from telemetry.http.forward_payload import (
    BROKER_ID_ATTRIBUTE,
    BROKER_LISTENER_ATTRIBUTE,
    forwarded_otlp,
)
from telemetry.server.bootstrap import Server
from telemetry.server.config import load_settings
from tests.telemetry.kafka_wire_client import otlp_payload, xerial_snappy, zstd_stream

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping
    from pathlib import Path

TOKEN = "broker-secret"
INSTANCE = Uuid(0x0123456789ABCDEF, 0x0FEDCBA987654321)


def encode_string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_push(
    data: bytes,
    *,
    client_id: str | None = "orders",
    terminating: bool = False,
    interval_ms: int = 1000,
    received_ms: int = 1_700_000_000_000,
    port: int = 40123,
    listener: str | None = "PLAINTEXT",
) -> bytes:
    """One push as the Java plugin's ``ForwardCodec`` writes it."""
    strings = (
        client_id,
        "apache-kafka-java",
        "4.4.0",
        "127.0.0.1",
        "User:ANONYMOUS",
        listener,
        "OTLP",
    )
    return (
        INSTANCE.to_bytes()
        + struct.pack(">biqi", 1 if terminating else 0, interval_ms, received_ms, port)
        + b"".join(encode_string(s) for s in strings)
        + struct.pack(">i", len(data))
        + data
    )


def encode_request(broker_id: int, pushes: list[bytes]) -> bytes:
    return struct.pack(">bii", 1, broker_id, len(pushes)) + b"".join(pushes)


@pytest.fixture(name="server")
async def forward_server(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Server]:
    forward = getattr(request, "param", f'[forward]\ntoken = "{TOKEN}"\n')
    config = tmp_path / "kip714.toml"
    config.write_text(forward + "[telemetry]\nmax_bytes = 1024\nmax_decompressed_bytes = 4096\n")
    settings = load_settings(
        config, data_dir=tmp_path / "data", kafka_listen="127.0.0.1:0", http_listen="127.0.0.1:0"
    )
    running = Server(settings)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


def landed_rows(data_dir: Path) -> list[dict[str, Any]]:
    """The default Iceberg landing's committed rows (``<data_dir>/lake``), in push order."""
    catalog = load_catalog("kip714", type="sql", uri=f"sqlite:///{data_dir / 'lake'}/catalog.db")
    table = catalog.load_table(("kip714", "metrics")).scan().to_arrow()
    rows: list[dict[str, Any]] = table.sort_by([("push_offset", "ascending")]).to_pylist()
    return rows


async def post(server: Server, body: bytes, token: str | None = TOKEN) -> tuple[int, Any]:
    status, _, answer = await post_answer(server, body, token)
    return status, answer


async def post_answer(
    server: Server, body: bytes, token: str | None = TOKEN
) -> tuple[int, Mapping[str, str], Any]:
    """Status, headers and JSON body of a forward request."""
    assert server.http_address is not None
    host, port = server.http_address
    headers = {"Content-Type": CONTENT_TYPE}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://{host}:{port}{FORWARD_PATH}", data=body, headers=headers) as answer,
    ):
        return answer.status, answer.headers, await answer.json()


async def test_forwarded_pushes_land_with_the_clients_and_the_brokers_context(
    server: Server, tmp_path: Path
) -> None:
    body = encode_request(
        3,
        [
            encode_push(otlp_payload("org.apache.kafka.producer.a", points=2)),
            encode_push(otlp_payload("org.apache.kafka.producer.b"), terminating=True, port=-1),
        ],
    )
    status, answer = await post(server, body)
    assert (status, answer) == (200, {"error_codes": [0, 0], "throttle_time_ms": 0})
    await server.stop()

    rows = landed_rows(tmp_path / "data")
    assert [r["metric_name"] for r in rows] == [
        "org.apache.kafka.producer.a",
        "org.apache.kafka.producer.a",
        "org.apache.kafka.producer.b",
    ]
    first, last = rows[0], rows[-1]
    assert first["client_instance_id"] == str(INSTANCE)
    assert first["client_id"] == "orders"
    assert first["client_software_name"] == "apache-kafka-java"
    assert first["client_source_address"] == "127.0.0.1"
    assert first["principal"] == "User:ANONYMOUS"
    assert dict(first["resource_attributes"]) == {
        BROKER_ID_ATTRIBUTE: "3",
        BROKER_LISTENER_ATTRIBUTE: "PLAINTEXT",
    }
    assert first["received_time"].timestamp() == 1_700_000_000.0  # the broker's clock
    assert not first["terminating"]
    assert last["terminating"]
    assert first["push_offset"] != last["push_offset"]


async def test_a_wrong_or_missing_token_is_refused_and_nothing_is_logged(server: Server) -> None:
    body = encode_request(1, [encode_push(otlp_payload("m"))])
    assert (await post(server, body, token="guess"))[0] == 401
    assert (await post(server, body, token=None))[0] == 401
    assert server.log is not None
    assert server.log.log_end == 0


@pytest.mark.parametrize("server", [""], indirect=True)
async def test_without_a_configured_token_the_route_is_disabled(server: Server) -> None:
    status, answer = await post(server, encode_request(1, []), token="")
    assert status == 403
    assert "forward.token" in answer["error"]


async def test_a_push_over_the_decompressed_limit_is_answered_too_large_alone(
    server: Server,
) -> None:
    big = otlp_payload("m", points=300)
    assert len(big) > 4096
    body = encode_request(1, [encode_push(big), encode_push(otlp_payload("m"))])
    status, answer = await post(server, body)
    assert status == 200
    assert answer["error_codes"] == [int(ErrorCode.TELEMETRY_TOO_LARGE), 0]
    assert server.log is not None
    assert server.log.log_end == 1


async def test_malformed_bodies_are_400_and_the_server_keeps_serving(server: Server) -> None:
    good = encode_push(otlp_payload("m"))
    for body in (
        b"",
        encode_request(1, [good])[:-1],  # truncated payload
        encode_request(1, [good]) + b"x",  # trailing bytes
        struct.pack(">bii", 2, 1, 0),  # unknown version
        struct.pack(">bii", 1, 1, 2**31 - 1),  # a count the body cannot hold
    ):
        status, answer = await post(server, body)
        assert status == 400, body[:20]
        assert "not a forward request" in answer["error"]
    assert (await post(server, encode_request(1, [good])))[1]["error_codes"] == [0]


@pytest.mark.parametrize(
    "server", [f'[forward]\ntoken = "{TOKEN}"\nmax_request_bytes = 2048\n'], indirect=True
)
async def test_a_body_over_the_limit_is_413_without_buffering_it(server: Server) -> None:
    assert server.http_address is not None
    host, port = server.http_address

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(10_000):  # 10 MB offered in chunks, without a Content-Length
            yield b"\0" * 1024

    tracemalloc.start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://{host}:{port}{FORWARD_PATH}",
                data=endless(),
                headers={"Authorization": f"Bearer {TOKEN}"},
            ) as answer,
        ):
            status = answer.status
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 413
    assert peak < 5 * 1024 * 1024  # the server kept a few kB, not the 10 MB offered
    too_long = encode_request(1, [encode_push(b"\0" * 4000)])
    assert (await post(server, too_long))[0] == 413


def test_a_lying_count_costs_nothing() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ForwardFormatError, match="does not fit"):
            decode_forward_request(struct.pack(">bii", 1, 1, 2**31 - 1) + b"\0" * 100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


async def test_a_compressed_forwarded_push_is_logged_as_sent_and_lands_with_the_broker(
    server: Server, tmp_path: Path
) -> None:
    """Issue 35 item 5: no decompressed copy, no re-encoding; the broker rides in the context."""
    data = MetricsData.FromString(otlp_payload("org.apache.kafka.forwarded", points=30))
    for key, value in ((BROKER_ID_ATTRIBUTE, "99"), ("service.name", "orders")):
        data.resource_metrics[0].resource.attributes.add(key=key).value.string_value = value
    claimed = data.SerializeToString()
    sent = zstd_stream(claimed)
    assert len(sent) < len(claimed)
    assert forwarded_otlp(sent, 4096).payload == sent
    status, answer = await post(server, encode_request(5, [encode_push(sent, listener="INTERNAL")]))
    await server.stop()

    assert (status, answer) == (200, {"error_codes": [0], "throttle_time_ms": 0})
    stored = b"".join(p.read_bytes() for p in (tmp_path / "data" / "log").glob("*.log"))
    assert sent in stored
    assert claimed not in stored
    rows = landed_rows(tmp_path / "data")
    assert rows
    assert {tuple(sorted(dict(r["resource_attributes"]).items())) for r in rows} == {
        (
            (BROKER_ID_ATTRIBUTE, "5"),
            (BROKER_LISTENER_ATTRIBUTE, "INTERNAL"),
            ("service.name", "orders"),
        )
    }


QUOTA_CONFIG = f"""[forward]
token = "{TOKEN}"
[[quotas.clients]]
user = "kafka-broker"
client_id = "broker-7"
push_byte_rate = 100
"""


@pytest.mark.parametrize("server", [QUOTA_CONFIG], indirect=True)
async def test_a_broker_over_its_byte_quota_is_throttled_then_muted(server: Server) -> None:
    """Forwarded traffic is one client quota entity per broker, enforced as on every route."""
    assert server.log is not None and server.http_address is not None
    data = otlp_payload("org.apache.kafka.producer.forwarded", points=20)
    status, first = await post(server, encode_request(7, [encode_push(data)]))
    logged = server.log.log_end
    host, port = server.http_address
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://{host}:{port}{FORWARD_PATH}",
            data=encode_request(7, [encode_push(data)]),
            headers={"Content-Type": CONTENT_TYPE, "Authorization": f"Bearer {TOKEN}"},
        ) as muted,
    ):
        muted_body = await muted.json()
        retry_after = int(muted.headers["Retry-After"])
    other_status, other = await post(server, encode_request(8, [encode_push(data)]))

    assert status == 200
    assert first["error_codes"] == [ErrorCode.NONE]
    assert first["throttle_time_ms"] > 0  # accepted, and the broker is told to wait
    assert muted.status == 429
    assert 1 <= retry_after == -(-muted_body["throttle_time_ms"] // 1000)
    assert logged == 1  # the muted request logged nothing...
    assert (other_status, other["error_codes"], other["throttle_time_ms"]) == (200, [0], 0)
    assert server.log.log_end == 2  # ...and another broker is not affected


async def test_compressed_payloads_are_decompressed_and_non_otlp_ones_refused_per_push(
    server: Server, tmp_path: Path
) -> None:
    """What a Kafka 3.7 broker forwards: each push as its client compressed it."""
    otlp = {codec: otlp_payload(f"org.apache.kafka.{codec}") for codec in CODECS}
    pushes = [
        otlp["none"],
        zstd_stream(otlp["zstd"]),
        lz4.frame.compress(otlp["lz4"]),
        gzip.compress(otlp["gzip"], compresslevel=0),  # librdkafka's level
        xerial_snappy(otlp["snappy"]),
        bytes(cramjam.snappy.compress_raw(otlp["raw_snappy"])),  # librdkafka's snappy
        b"\x8a\xff definitely not protobuf",
        zstd_stream(b"\x8a\xff compressed, yet not protobuf"),
        zstd_stream(b"\0" * 100_000),  # within max_request_bytes, over max_decompressed_bytes
    ]
    status, answer = await post(server, encode_request(2, [encode_push(p) for p in pushes]))
    metrics = await scrape(server)
    await server.stop()

    invalid, too_large = int(ErrorCode.INVALID_RECORD), int(ErrorCode.TELEMETRY_TOO_LARGE)
    assert status == 200
    assert answer["error_codes"] == [0, 0, 0, 0, 0, 0, invalid, invalid, too_large]
    rows = landed_rows(tmp_path / "data")
    assert sorted(r["metric_name"] for r in rows) == sorted(
        f"org.apache.kafka.{codec}" for codec in CODECS
    )
    assert all(dict(r["resource_attributes"])[BROKER_ID_ATTRIBUTE] == "2" for r in rows)
    assert 'kip714_forward_pushes_total{error_code="NONE"} 6.0' in metrics
    assert 'kip714_forward_pushes_total{error_code="INVALID_RECORD"} 2.0' in metrics
    assert 'kip714_forward_pushes_total{error_code="TELEMETRY_TOO_LARGE"} 1.0' in metrics
    for codec, count in (("zstd", 1), ("lz4", 1), ("gzip", 1), ("snappy", 2)):
        assert f'kip714_forward_decompressed_total{{codec="{codec}"}} {count}.0' in metrics


CODECS = ("none", "zstd", "lz4", "gzip", "snappy", "raw_snappy")


async def scrape(server: Server) -> str:
    assert server.http_address is not None
    host, port = server.http_address
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{host}:{port}/metrics") as answer,
    ):
        assert answer.status == 200
        return await answer.text()


async def test_a_request_during_shutdown_is_answered_503_to_retry_not_dropped(
    server: Server,
) -> None:
    """Stopping closes the Kafka listener (and its decompression threads) before HTTP."""
    assert server.listener is not None and server.log is not None and server.http_address
    server.listener.decompressor.shutdown(wait=True)
    host, port = server.http_address
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://{host}:{port}{FORWARD_PATH}",
            data=encode_request(1, [encode_push(otlp_payload("m"))]),
            headers={"Content-Type": CONTENT_TYPE, "Authorization": f"Bearer {TOKEN}"},
        ) as answer,
    ):
        assert answer.status == 503
        assert answer.headers["Retry-After"] == "1"
    assert server.log.log_end == 0


async def test_forwarded_contexts_follow_the_same_rules_as_every_doors_pushes(
    server: Server,
) -> None:
    """Built by ``ingress.push_context``: an empty client id or address is absent, as from Kafka."""
    assert server.log is not None
    data = otlp_payload("m")
    plain = encode_push(data, client_id="", interval_ms=-1)
    # The same push with an empty source address: its string is the 4th of 7.
    empty_address = plain.replace(encode_string("127.0.0.1"), encode_string(""), 1)
    status, answer = await post(server, encode_request(5, [plain, empty_address]))
    assert (status, answer) == (200, {"error_codes": [0, 0], "throttle_time_ms": 0})
    logged = server.log.read(0)
    assert [p.client_id for p in logged] == [None, None]
    assert [p.push_interval_ms for p in logged] == [0, 0]
    assert [p.subscription_id for p in logged] == [0, 0]
    assert [p.content_type for p in logged] == ["OTLP", "OTLP"]
    assert [p.client_source_address for p in logged] == ["127.0.0.1", None]
    assert [p.client_source_port for p in logged] == [40123, 40123]
