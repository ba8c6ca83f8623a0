"""HTTP bodies draw from the request-memory pool: a compression bomb flood stays bounded."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from typing import TYPE_CHECKING

import aiohttp
import pytest

from tests.telemetry.serve_process import ServeProcess
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

MIB = 1024 * 1024
POOL = 8 * MIB
CONFIG = f"""
[kafka]
max_frame_bytes = {MIB}
[limits]
queued_max_request_bytes = {POOL}
[telemetry]
max_decompressed_bytes = {2 * MIB}
[http]
memory_wait_ms = 300
"""


def json_bomb(points: int) -> bytes:
    """OTLP/JSON of one gauge with ``points`` tiny points: megabytes from kilobytes of gzip."""
    document = {
        "resourceMetrics": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "bomb"}}]
                },
                "scopeMetrics": [
                    {"metrics": [{"name": "m", "gauge": {"dataPoints": [{"asInt": "1"}] * points}}]}
                ],
            }
        ]
    }
    return gzip.compress(json.dumps(document).encode(), 9)


def _memory_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.M)
    assert match is not None
    return int(match.group(1))


async def _post(url: str, body: bytes) -> tuple[int, str | None]:
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(120)) as r,
    ):
        await r.read()
        return r.status, r.headers.get("Retry-After")


async def test_forty_compressed_json_bombs_stay_under_the_pool_plus_100_mib(
    tmp_path: Path,
) -> None:
    # ~1.9 MiB of JSON each: 40 of them decoded at once (as before this pool) are 76 MiB,
    # and parsing one costs ~55 MiB of Python objects (json_format), which no pool counts.
    bomb = json_bomb(120_000)
    assert len(bomb) < 16 * 1024
    server = ServeProcess(tmp_path / "data", CONFIG).start()
    try:
        assert server.process is not None
        pid = server.process.pid
        url = f"http://{server.http[0]}:{server.http[1]}/v1/metrics"
        assert (await _post(url, json_bomb(10)))[0] == 200  # warm: every module and thread loaded
        baseline_kib = _memory_kib(pid, "VmRSS")
        answers = await asyncio.gather(*(_post(url, bomb) for _ in range(40)))
        peak_kib = _memory_kib(pid, "VmHWM")
        assert (await _post(url, json_bomb(10)))[0] == 200  # served again once the flood is over
    finally:
        code = server.stop()
    statuses = [status for status, _ in answers]
    assert code == 0
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(200) >= 1
    assert statuses.count(503) >= 1
    assert all(int(retry) >= 1 for status, retry in answers if status == 503 and retry)
    assert all(retry is not None for status, retry in answers if status == 503)
    assert (peak_kib - baseline_kib) * 1024 < POOL + 100 * MIB, (baseline_kib, peak_kib)


@pytest.mark.parametrize(
    ("malformed_body", "content_type"),
    [
        (b'{"resourceMetrics": [', "application/json"),
        (b"\xff\xff\xff", "application/x-protobuf"),
        # a ResourceMetrics whose resource is cut short: the request reads, the resource does not
        (b"\x0a\x04\x0a\x02\x0a\x05", "application/x-protobuf"),
    ],
    ids=["json", "protobuf", "protobuf-resource"],
)
async def test_a_malformed_body_is_charged_to_its_sender(
    tmp_path: Path, malformed_body: bytes, content_type: str
) -> None:
    """The body named nobody, so its principal with client id "" pays, as a Kafka request would."""
    config = '[[quotas.clients]]\nuser = "ANONYMOUS"\nrequest_percentage = 1e-9\n'
    nameless = json.dumps({"resourceMetrics": [{"resource": {}, "scopeMetrics": []}]}).encode()
    headers = {"Content-Type": "application/json"}
    async with running(tmp_path, config) as server:
        assert server.http_address is not None
        url = f"http://{server.http_address[0]}:{server.http_address[1]}/v1/metrics"
        async with aiohttp.ClientSession() as session:
            sent_as = {"Content-Type": content_type}
            async with session.post(url, data=malformed_body, headers=sent_as) as r:
                malformed = r.status
            async with session.post(url, data=nameless, headers=headers) as r:
                after = r.status, r.headers.get("Retry-After")
    assert malformed == 400
    assert after[0] == 429  # the time the malformed body cost was charged: the sender is muted
    assert after[1] is not None
