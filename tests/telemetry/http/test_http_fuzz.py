"""The HTTP routes under 20,000 random, truncated and mutated inputs: never a 5xx but 503,
never a crash, and a good client served after every burst."""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import zlib
from typing import TYPE_CHECKING, Final

import aiohttp
import cramjam
import zstandard

from tests.telemetry.http.test_http_otlp import SDK_BODY, otlp_request, resource_metrics
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from telemetry.server.bootstrap import Server

INPUTS: Final = 20_000
BURST: Final = 1_000
CONCURRENCY: Final = 16
RAW_SHARE: Final = 0.1
ROUTES: Final = (
    "/v1/metrics",
    "/v1/telemetry/subscriptions",
    "/v1/telemetry/push",
    "/v1/telemetry/forward",
    "/admin/quotas",
    "/admin/subscriptions/fuzz",
)
CONTENT_TYPES: Final = (
    "application/x-protobuf",
    "application/json",
    "text/plain",
    "application/octet-stream",
    "",
    "application/json; charset=utf-8",
)
ENCODINGS: Final = ("", "gzip", "deflate", "zstd", "snappy", "x-snappy-framed", "lz4", "br", "gz")


def _seeds() -> list[bytes]:
    proto = otlp_request(resource_metrics({"service.name": "fuzz"}, "m", 5))
    document = json.dumps(
        {
            "resourceMetrics": [
                {
                    "resource": {
                        "attributes": [{"key": "service.name", "value": {"stringValue": "f"}}]
                    },
                    "scopeMetrics": [
                        {"metrics": [{"name": "m", "gauge": {"dataPoints": [{"asInt": "1"}]}}]}
                    ],
                }
            ]
        }
    ).encode()
    return [proto, SDK_BODY, document, b"{}", b'{"set": {"metrics": "*"}}', b""]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    choice = rng.random()
    if choice < 0.25 and data:
        return data[: rng.randrange(len(data))]  # truncated
    if choice < 0.5 and data:
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        return bytes(mutated)
    if choice < 0.6:
        return rng.randbytes(rng.randrange(2048))  # random
    if choice < 0.7 and data:
        return data * rng.randint(2, 20)  # repeated
    return data


_ENCODERS: Final[dict[str, Callable[[bytes], bytes]]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
    "snappy": lambda data: bytes(cramjam.snappy.compress_raw(data)),
    "lz4": lambda data: bytes(cramjam.lz4.compress(data)),
}


def _encode(rng: random.Random, encoding: str, data: bytes) -> bytes:
    encoder = _ENCODERS.get(encoding)
    if encoder is None or rng.random() < 0.2:
        return data  # no encoding, an unknown one, or a lying Content-Encoding
    return bytes(encoder(data))


def _request(rng: random.Random, seeds: list[bytes]) -> tuple[str, str, dict[str, str], bytes]:
    route = rng.choice(ROUTES)
    method = "POST" if rng.random() < 0.9 else rng.choice(("GET", "DELETE", "PUT"))
    headers: dict[str, str] = {}
    content_type = rng.choice(CONTENT_TYPES)
    if content_type:
        headers["Content-Type"] = content_type
    encoding = rng.choice(ENCODINGS)
    if encoding:
        headers["Content-Encoding"] = encoding
    if rng.random() < 0.1:
        headers["Authorization"] = rng.choice(
            ("Basic !!!", "Basic " + "QQ==" * 3, "Bearer x", "Basic Zm9vOmJhcg==")
        )
    if rng.random() < 0.05:
        headers["Origin"] = "https://evil.example"
    body = _encode(rng, encoding, _mutate(rng, rng.choice(seeds)))
    return method, route, headers, body


def _raw(rng: random.Random, seeds: list[bytes]) -> bytes:
    """A request that breaks HTTP itself: bad lines, lying lengths, huge or odd headers."""
    body = _mutate(rng, rng.choice(seeds))
    line = rng.choice(
        (
            b"POST /v1/metrics HTTP/1.1",
            b"POST /v1/metrics HTTP/9.9",
            b"P\x00ST / HTTP/1.1",
            b"POST " + b"/" * rng.randint(1, 20_000) + b" HTTP/1.1",
            b"GET /healthz HTTP/1.0",
        )
    )
    length = rng.choice((len(body), len(body) + rng.randint(1, 100), max(0, len(body) - 1), -1))
    headers = [b"Host: 127.0.0.1", b"Content-Type: application/x-protobuf"]
    headers.append(
        b"Content-Length: " + str(length).encode()
        if rng.random() < 0.8
        else b"Transfer-Encoding: chunked"
    )
    if rng.random() < 0.2:
        headers.append(b"X-Big: " + b"a" * rng.randint(1, 20_000))
    if rng.random() < 0.1:
        headers.append(rng.randbytes(rng.randint(1, 64)))
    return line + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + body


async def _send_raw(server: Server, data: bytes) -> int | None:
    assert server.http_address is not None
    reader, writer = await asyncio.open_connection(*server.http_address)
    try:
        writer.write(data)
        writer.write_eof()
        head = await asyncio.wait_for(reader.read(64 * 1024), 20)
    except (ConnectionError, OSError):
        return None
    finally:
        writer.close()
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


async def _good(session: aiohttp.ClientSession, base: str) -> int:
    headers = {"Content-Type": "application/x-protobuf"}
    async with session.post(base + "/v1/metrics", data=SDK_BODY, headers=headers) as response:
        await response.read()
        return response.status


async def test_twenty_thousand_hostile_http_inputs(tmp_path: Path) -> None:
    rng = random.Random(714)
    seeds = _seeds()
    statuses: list[int | None] = []
    served_after_bursts = []
    async with running(tmp_path, "") as server:
        assert server.http_address is not None
        base = f"http://{server.http_address[0]}:{server.http_address[1]}"
        connector = aiohttp.TCPConnector(limit=CONCURRENCY)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def one() -> int | None:
                if rng.random() < RAW_SHARE:
                    return await _send_raw(server, _raw(rng, seeds))
                method, route, headers, body = _request(rng, seeds)
                try:
                    async with session.request(
                        method, base + route, data=body, headers=headers
                    ) as response:
                        await response.read()
                        return response.status
                except aiohttp.ClientError:
                    return None  # the server closed the connection: allowed

            semaphore = asyncio.Semaphore(CONCURRENCY)

            async def bounded() -> int | None:
                async with semaphore:
                    return await one()

            for _ in range(INPUTS // BURST):
                statuses += await asyncio.gather(*(bounded() for _ in range(BURST)))
                served_after_bursts.append(await _good(session, base))
    answered = [status for status in statuses if status is not None]
    assert len(statuses) == INPUTS
    assert len(answered) > INPUTS // 2
    assert not [status for status in answered if status >= 500 and status != 503]
    assert served_after_bursts == [200] * (INPUTS // BURST)
