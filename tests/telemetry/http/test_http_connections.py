"""HTTP connections under the same [limits] as Kafka's, with header, body and idle timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest

from telemetry.enforcement import LimitSettings
from telemetry.enforcement.descriptors import connection_ceilings, fit_to_descriptors
from telemetry.wire import SIZE_PREFIX, ApiKey, ApiVersionsRequest, decode_response, encode_request
from telemetry.wire.headers import RequestHeader
from tests.telemetry.serve_process import SERVING
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

IO_TIMEOUT_S = 20.0


def test_the_connection_limits_follow_the_descriptor_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert connection_ceilings(1024) == (768, 384)
    assert connection_ceilings(None) == (10_000, 1_000)
    assert connection_ceilings(100_000) == (10_000, 1_000)
    with caplog.at_level(logging.WARNING, "telemetry.enforcement.descriptors"):
        defaults = fit_to_descriptors(LimitSettings(), 1024)
        assert not caplog.records  # a default is lowered silently
        explicit = fit_to_descriptors(LimitSettings(max_connections=5000), 1024)
    assert (defaults.max_connections, defaults.max_connections_per_ip) == (768, 384)
    assert explicit.max_connections == 768
    assert "limits.max_connections = 5000 is above what 1024 file descriptors allow" in caplog.text


def _api_versions_from(address: str, kafka: tuple[str, int]) -> bool:
    """Whether the Kafka listener answers ApiVersions to a client bound to ``address``."""
    header = RequestHeader(
        api_key=ApiKey.API_VERSIONS, api_version=3, correlation_id=7, client_id="t"
    )
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    with socket.create_connection(kafka, IO_TIMEOUT_S, source_address=(address, 0)) as sock:
        sock.sendall(encode_request(header, request))
        data = b""
        while len(data) < SIZE_PREFIX.size or len(data) < SIZE_PREFIX.size + int.from_bytes(
            data[:4], "big"
        ):
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:  # refused: closed unserved
                return False
            if not chunk:
                return False
            data += chunk
    correlation_id, _ = decode_response(data[SIZE_PREFIX.size :], ApiKey.API_VERSIONS, 3)
    return correlation_id == 7


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def test_idle_http_sockets_under_1024_descriptors_leave_kafka_serving(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1400 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # for this side's 1,100 sockets
    command = [
        sys.executable, "-m", "telemetry", "serve", "--data-dir", str(tmp_path / "data"),
        "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-format", "json",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limit_descriptors,  # noqa: PLW1509 - only setrlimit, before exec
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    assert process.stderr is not None
    drain = threading.Thread(target=lambda: lines.extend(process.stderr or ()), daemon=True)
    drain.start()
    idle: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 30
        match = None
        while match is None and time.monotonic() < deadline and process.poll() is None:
            match = next(filter(None, map(SERVING.search, list(lines))), None)
            time.sleep(0.02)
        assert match is not None, lines
        kafka = (match["kh"], int(match["kp"]))
        http_address = (match["hh"], int(match["hp"]))
        for _ in range(1100):
            idle.append(socket.create_connection(http_address, IO_TIMEOUT_S))
        # Every idle socket was accepted or refused; a new address is still served.
        assert _api_versions_from("127.0.0.2", kafka)
        metrics = http.client.HTTPConnection(
            *http_address, timeout=IO_TIMEOUT_S, source_address=("127.0.0.3", 0)
        )
        metrics.request("GET", "/metrics")
        body = metrics.getresponse().read().decode()
        metrics.close()
    finally:
        for sock in idle:
            sock.close()
        process.terminate()
        code = process.wait(60)
        drain.join(10)
        process.stderr.close()
    assert code == 0, lines[-5:]
    refused = next(
        float(line.split()[-1])
        for line in body.splitlines()
        if line.startswith('kip714_http_connections_refused_total{reason="max_connections_per_ip"}')
    )
    assert refused >= 1100 - 384
    logged = [line for line in lines if "refusing HTTP connections from 127.0.0.1" in line]
    assert len(logged) == 1  # at most once per address and minute


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    with contextlib.suppress(ConnectionError):
        while await asyncio.wait_for(reader.read(65536), IO_TIMEOUT_S):
            pass
    return reader.at_eof()


async def _open(server: Server) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert server.http_address is not None
    return await asyncio.open_connection(*server.http_address)


async def test_heads_and_bodies_that_never_finish_are_closed(tmp_path: Path) -> None:
    config = "[http]\nheader_timeout_ms = 200\nbody_timeout_ms = 300\n"
    async with running(tmp_path, config) as server:
        silent = await _open(server)
        partial_head = await _open(server)
        partial_head[1].write(b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\n")
        partial_body = await _open(server)
        partial_body[1].write(
            b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
            b"Content-Type: application/x-protobuf\r\n\r\n0123456789"
        )
        closed = [await _closed_by_server(reader) for reader, _ in (silent, partial_head)]
        closed.append(await _closed_by_server(partial_body[0]))
        keep_alive = await _open(server)
        # A complete request is served, and waiting between requests is keep-alive's business.
        keep_alive[1].write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = await asyncio.wait_for(keep_alive[0].readuntil(b"\r\n\r\n"), IO_TIMEOUT_S)
        length = next(
            int(line.split(b":")[1]) for line in first.split(b"\r\n") if b"Content-Length" in line
        )
        await keep_alive[0].readexactly(length)
        assert server.http_connections is not None
        stats = server.http_connections
        before = dict(stats.closed)
        await asyncio.sleep(0.5)
        keep_alive[1].write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        second = await asyncio.wait_for(keep_alive[0].readuntil(b"\r\n\r\n"), IO_TIMEOUT_S)
        for _, writer in (silent, partial_head, partial_body, keep_alive):
            writer.close()
    assert closed == [True, True, True]
    assert before == {"header_timeout": 2, "body_timeout": 1}
    assert b" 200 " in first
    assert b"200" in second


async def test_an_idle_keep_alive_connection_closes_after_connections_max_idle_ms(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, "[limits]\nconnections_max_idle_ms = 300\n") as server:
        reader, writer = await _open(server)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answered = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IO_TIMEOUT_S)
        closed = await _closed_by_server(reader)
        writer.close()
    assert b" 200 " in answered
    assert closed


async def test_kafka_and_http_connections_count_together(tmp_path: Path) -> None:
    async with running(tmp_path, "[limits]\nmax_connections_per_ip = 3\n") as server:
        assert server.listener is not None
        kafka = server.listener.bound_address
        held = [await _open(server) for _ in range(3)]
        for _, writer in held:  # admitted and being read: a request each
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        for reader, _ in held:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IO_TIMEOUT_S)
        full = await asyncio.to_thread(_api_versions_from, "127.0.0.1", kafka)
        for _, writer in held:
            writer.close()
            await writer.wait_closed()
        deadline = time.monotonic() + IO_TIMEOUT_S
        assert server.http_connections is not None
        while server.http_connections.open and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        freed = await asyncio.to_thread(_api_versions_from, "127.0.0.1", kafka)
    assert not full
    assert freed


class _Transport(asyncio.Transport):
    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 1) if name == "peername" else default


class _Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.received = bytearray()

    def data_received(self, data: bytes) -> None:
        self.received += data


_POST = b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789"
_CHUNKED_POST = (
    b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\n01234\r\n0\r\n\r\n"
)


@pytest.mark.parametrize(
    "reads",
    [
        [_POST],
        [_POST[:7], _POST[7:56], _POST[56:60], _POST[60:]],  # the head's end split
        [_POST + _POST],  # pipelined
        [_POST + _POST[:20], _POST[20:]],
        [_CHUNKED_POST[:70], _CHUNKED_POST[70:] + _POST],
    ],
    ids=["whole", "split", "pipelined", "pipelined-split", "chunked"],
)
async def test_request_boundaries_are_followed_however_the_reads_fall(reads: list[bytes]) -> None:
    from telemetry.enforcement import ConnectionLimits, QuotaSettings  # noqa: PLC0415
    from telemetry.http.connections import HttpConnectionGate  # noqa: PLC0415

    limits = ConnectionLimits(QuotaSettings(), LimitSettings())
    gate = HttpConnectionGate(limits, lambda: 0, header_timeout_ms=100, body_timeout_ms=100)
    inner = _Inner()
    protocol = gate.factory(lambda: inner)()
    protocol.connection_made(_Transport())
    for data in reads:
        protocol.data_received(data)
    # Between requests: nothing timed (keep-alive's business), everything passed on.
    assert protocol._deadline is None  # type: ignore[attr-defined]
    assert bytes(inner.received) == b"".join(reads)
    protocol.data_received(_POST[:-3])  # a body under way is timed as a body
    assert protocol._reason == "body_timeout"  # type: ignore[attr-defined]
    await asyncio.sleep(0.3)
    assert gate.stats.closed == {"body_timeout": 1}
    protocol.connection_lost(None)
