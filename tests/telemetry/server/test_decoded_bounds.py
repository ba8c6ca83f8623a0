"""Work is charged by what a push decodes to, not by its bytes on the wire (issue 35, item 4).

A 1.2 KB zstd push can decode to millions of empty data points. These tests
drive a real server with such pushes: ``push_decoded_byte_rate`` throttles
the sender (Kafka protocol and HTTP), ``[log] max_pending_decoded_bytes``
throttles every sender once the landing's backlog is that large, and the
landing skips a push over ``max_data_points_per_push`` whole and counts it.
Each test also checks another client is still answered meanwhile.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

import aiohttp
import pytest

from telemetry.core.codecs import CompressionType
from telemetry.errors import ErrorCode
from telemetry.http.forward_codec import CONTENT_TYPE
from telemetry.wire.admin_apis import AdminApiKey
from telemetry.wire.quota_messages import (
    AlterClientQuotasEntry,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    ComponentData,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityData,
    QuotaMatchType,
    QuotaOp,
)
from tests.telemetry.admin.admin_support import admin_call
from tests.telemetry.http.test_http_forward import encode_push, encode_request, landed_rows
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload, zstd_stream
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

SUBSCRIPTION = '[subscriptions.all]\nmetrics = ["*"]\n"interval.ms" = 100\n'
#: 10 KB/s: ten sends of 1.2 KB in a second are within it, as sent.
RATE = 10_000
WAIT_S = 60.0


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, body: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def empty_gauge_points(points: int, name: str = "bomb") -> bytes:
    """``MetricsData`` of one gauge with ``points`` empty data points: 2 bytes each."""
    gauge = _field(1, b"") * points
    metric = _field(1, name.encode()) + _field(5, gauge)
    return _field(1, _field(2, _field(2, metric)))


#: 300,000 points: 600 KB decoded (past the inline limit: decompressed on a thread),
#: a few hundred bytes compressed.
BOMB = empty_gauge_points(300_000)
BOMB_ZSTD = zstd_stream(BOMB)


def recorder(tmp_path: Path) -> str:
    """An exporter that only notes offsets, in place of the landing: these tests are not
    about landing 300,000 rows a push, and flattening them would only slow the test."""
    path = tmp_path / "recorded.jsonl"
    return (
        '[exporters.landing]\nenabled = false\n[exporters.recorder]\ntype = "test-recorder"\n'
        + f'[exporters.recorder.options]\npath = "{path}"\n'
    )


def decoded_quota(tmp_path: Path, key: str = "push_decoded_byte_rate") -> str:
    return (
        SUBSCRIPTION
        + f'[[quotas.clients]]\nclient_id = "bomber"\n{key} = {RATE}\n'
        + recorder(tmp_path)
    )


def kafka_address(server: Server) -> tuple[str, int]:
    assert server.listener is not None
    return server.listener.bound_address


async def scrape(server: Server) -> str:
    assert server.http_address is not None
    host, port = server.http_address
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{host}:{port}/metrics") as answer,
    ):
        return await answer.text()


async def bomb_over_kafka(
    server: Server, pushes: int = 1, bomb: bytes = BOMB_ZSTD
) -> tuple[list[tuple[int, int]], bool]:
    """zstd bombs from client id ``bomber``; whether a bystander was answered meanwhile.

    One push when it is to be throttled: the throttled connection is then muted.
    """
    bomber = await WireClient.connect(*kafka_address(server), "bomber")
    bystander = await WireClient.connect(*kafka_address(server), "bystander")
    try:
        subscription = await bomber.subscribe()
        answers = []
        for _ in range(pushes):
            answer = await bomber.push(
                subscription.client_instance_id,
                subscription.subscription_id,
                bomb,
                CompressionType.ZSTD,
            )
            answers.append((answer.error_code, answer.throttle_time_ms))
            await asyncio.sleep(0.15)  # the push interval
        versions = await asyncio.wait_for(bystander.api_versions(), WAIT_S)
    finally:
        await bomber.close()
        await bystander.close()
    return answers, versions.error_code == ErrorCode.NONE


@pytest.mark.parametrize(
    "points",
    [100_000, 300_000],  # 200 KB decoded: checked on the loop; 600 KB: on the decoding thread
    ids=["inline", "thread"],
)
async def test_a_decoded_byte_quota_throttles_a_small_compressed_push_that_decodes_huge(
    tmp_path: Path, points: int
) -> None:
    plain = empty_gauge_points(points)
    bomb = zstd_stream(plain)
    assert len(bomb) * 100 < len(plain)
    (tmp_path / "decoded").mkdir()
    (tmp_path / "as_sent").mkdir()
    async with running(tmp_path / "decoded", decoded_quota(tmp_path / "decoded")) as server:
        answers, bystander_answered = await bomb_over_kafka(server, bomb=bomb)
        metrics = await scrape(server)
    async with running(
        tmp_path / "as_sent", decoded_quota(tmp_path / "as_sent", "push_byte_rate")
    ) as server:
        as_sent, _ = await bomb_over_kafka(server, pushes=2, bomb=bomb)

    # Accepted (a permissive quota, as Kafka's produce quota), and throttled for
    # 200 or 600 KB over 10 KB/s: the decoded bytes were charged.
    code, throttle_ms = answers[0]
    assert code == ErrorCode.NONE
    assert throttle_ms > 5_000
    assert bystander_answered
    assert 'kip714_throttles_total{reason="push_decoded_byte_rate"}' in metrics
    assert re.search(
        r'kip714_quota_push_decoded_byte_rate\{client_id="bomber",user=""\} [1-9]', metrics
    )
    # The same pushes under push_byte_rate (bytes as sent) are not throttled at all.
    assert as_sent == [(ErrorCode.NONE, 0), (ErrorCode.NONE, 0)]


async def test_an_http_push_that_decodes_huge_is_throttled_then_answered_429(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, decoded_quota(tmp_path)) as server:
        assert server.http_address is not None
        host, port = server.http_address
        base = f"http://{host}:{port}"
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{base}/v1/telemetry/subscriptions", json={"client_id": "bomber"}
            ) as answer:
                sub = await answer.json()
            headers = {
                "Kip714-Client-Instance-Id": sub["client_instance_id"],
                "Kip714-Subscription-Id": str(sub["subscription_id"]),
                "Kip714-Client-Id": "bomber",
                "Kip714-Compression-Type": str(int(CompressionType.ZSTD)),
            }
            statuses = []
            for _ in range(2):
                async with session.post(
                    f"{base}/v1/telemetry/push", data=BOMB_ZSTD, headers=headers
                ) as answer:
                    statuses.append((answer.status, await answer.json()))
                await asyncio.sleep(0.15)
        bystander = await WireClient.connect(*kafka_address(server), "bystander")
        try:
            versions = await asyncio.wait_for(bystander.api_versions(), WAIT_S)
        finally:
            await bystander.close()

    (first_status, first), (second_status, second) = statuses
    assert (first_status, first["error_code"]) == (200, ErrorCode.NONE)
    assert first["throttle_time_ms"] > 10_000
    assert (second_status, second["error_code"]) == (429, ErrorCode.THROTTLING_QUOTA_EXCEEDED)
    assert versions.error_code == ErrorCode.NONE


async def test_push_decoded_byte_rate_is_set_by_the_admin_api_and_alter_client_quotas(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, SUBSCRIPTION + recorder(tmp_path)) as server:
        assert server.http_address is not None
        host, port = server.http_address
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://{host}:{port}/admin/quotas",
                json={"entity": {"user": "alice"}, "set": {"push_decoded_byte_rate": 2048}},
            ) as answer,
        ):
            http_altered = (answer.status, await answer.json())
        client = await WireClient.connect(*kafka_address(server), "admin")
        try:
            altered = await admin_call(
                client,
                AdminApiKey.ALTER_CLIENT_QUOTAS,
                1,
                AlterClientQuotasRequest(
                    entries=(
                        AlterClientQuotasEntry(
                            entity=(EntityData(entity_type="client-id", entity_name="bomber"),),
                            ops=(QuotaOp(key="push_decoded_byte_rate", value=float(RATE)),),
                        ),
                    )
                ),
            )
            described = await admin_call(
                client,
                AdminApiKey.DESCRIBE_CLIENT_QUOTAS,
                1,
                DescribeClientQuotasRequest(
                    components=(
                        ComponentData(
                            entity_type="client-id", match_type=QuotaMatchType.EXACT, match="bomber"
                        ),
                    ),
                    strict=True,
                ),
            )
        finally:
            await client.close()
        in_force = {c.entity: c for c in server.enforcement.quota_settings.clients}
        answers, bystander_answered = await bomb_over_kafka(server)
    # Persisted in the metadata store: a restart on the same data directory has them.
    async with running(tmp_path, SUBSCRIPTION + recorder(tmp_path)) as restarted:
        after_restart = {c.entity: c for c in restarted.enforcement.quota_settings.clients}

    assert http_altered[0] == 200
    assert http_altered[1]["dynamic"] == {"push_decoded_byte_rate": 2048.0}
    assert isinstance(altered, AlterClientQuotasResponse)
    assert [e.error_code for e in altered.entries] == [0]
    assert isinstance(described, DescribeClientQuotasResponse)
    assert described.entries is not None
    [entry] = described.entries
    assert [(v.key, v.value) for v in entry.values] == [("push_decoded_byte_rate", float(RATE))]
    assert in_force[("alice", None)].push_decoded_byte_rate == 2048.0
    assert in_force[(None, "bomber")].push_decoded_byte_rate == float(RATE)
    assert answers[0][0] == ErrorCode.NONE and answers[0][1] > 10_000
    assert bystander_answered
    assert after_restart[(None, "bomber")].push_decoded_byte_rate == float(RATE)
    assert after_restart[("alice", None)].push_decoded_byte_rate == 2048.0


PENDING_CONFIG = (
    SUBSCRIPTION
    + '[forward]\ntoken = "t"\n'
    + "[log]\nmax_record_bytes = 1048576\nmax_pending_decoded_bytes = 1500000\n"
)


async def test_max_pending_decoded_bytes_throttles_pushes_as_a_full_log_does(
    tmp_path: Path,
) -> None:
    """Three forwarded bombs of 600 KB decoded in one request: the third is over 1.5 MB."""
    body = encode_request(1, [encode_push(BOMB_ZSTD, listener=None)] * 3)
    async with running(tmp_path, PENDING_CONFIG + recorder(tmp_path)) as server:
        assert server.http_address is not None and server.log is not None
        host, port = server.http_address
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://{host}:{port}/v1/telemetry/forward",
                data=body,
                headers={
                    "Content-Type": CONTENT_TYPE,
                    "Authorization": "Bearer t",
                },
            ) as answer,
        ):
            status, forwarded = answer.status, await answer.json()
        pending = server.log.stats.pending_decoded_bytes
        refused = server.log.stats.refused_pending_decoded
        bystander = await WireClient.connect(*kafka_address(server), "bystander")
        try:
            versions = await asyncio.wait_for(bystander.api_versions(), WAIT_S)
        finally:
            await bystander.close()
        metrics = await scrape(server)

    assert status == 200
    full = int(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
    assert forwarded["error_codes"] == [0, 0, full]
    assert forwarded["throttle_time_ms"] == 1000  # [log] full_throttle_ms, as a full disk budget
    assert refused == 1
    assert pending <= 1_500_000
    assert versions.error_code == ErrorCode.NONE
    assert "kip714_log_refused_pending_decoded_total 1.0" in metrics
    assert (
        'kip714_requests_refused_total{door="forward",reason="max_pending_decoded_bytes"} 1.0'
        in metrics
    )


LANDING_CONFIG = (
    SUBSCRIPTION
    + '[exporters.landing]\ntype = "iceberg"\n[exporters.landing.options]\n'
    + "max_file_age_s = 0.3\nworkers = 0\nmax_data_points_per_push = 1000\n"
)
SKIPPED = re.compile(
    r'^kip714_landing_skipped_pushes_total\{exporter="landing",'
    r'reason="max_data_points_per_push"\} (\S+)$',
    re.M,
)


async def test_the_landing_skips_a_push_over_max_data_points_per_push_and_counts_it(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, LANDING_CONFIG) as server:
        client = await WireClient.connect(*kafka_address(server), "points")
        try:
            subscription = await client.subscribe()
            codes = []
            for payload in (
                otlp_payload("org.apache.kafka.small", points=3),
                empty_gauge_points(1001, "org.apache.kafka.oversized"),
                otlp_payload("org.apache.kafka.after", points=2),
            ):
                answer = await client.push(
                    subscription.client_instance_id, subscription.subscription_id, payload
                )
                codes.append(answer.error_code)
                await asyncio.sleep(0.15)
            bystander = await WireClient.connect(*kafka_address(server), "bystander")
            try:
                versions = await asyncio.wait_for(bystander.api_versions(), WAIT_S)
            finally:
                await bystander.close()
        finally:
            await client.close()
        deadline = asyncio.get_running_loop().time() + WAIT_S
        counted = None
        while asyncio.get_running_loop().time() < deadline:
            match = SKIPPED.search(await scrape(server))
            counted = None if match is None else float(match.group(1))
            if counted == 1.0:
                break
            await asyncio.sleep(0.1)
    rows = landed_rows(tmp_path / "data")

    assert codes == [ErrorCode.NONE] * 3  # acknowledged: the door does not count points
    assert versions.error_code == ErrorCode.NONE
    assert counted == 1.0
    names = [r["metric_name"] for r in rows]
    assert names == ["org.apache.kafka.small"] * 3 + ["org.apache.kafka.after"] * 2
