"""A Kafka-protocol push whose payload is not OTLP: acknowledged (as Kafka does), never silent.

kip714 cannot judge a Kafka-protocol push before it answers (Kafka itself
does not parse the payload), so the push is logged and acknowledged; the
landing then skips it, counts it on /metrics
(``kip714_landing_undecodable_total{exporter}``), and ``kip714 log status``
names its offset.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING

import aiohttp

from telemetry.errors import ErrorCode
from telemetry.server.bootstrap import Server
from tests.exporters.lake_support import read_table
from tests.telemetry.cli.test_log_cli import kip714_log
from tests.telemetry.http.test_http_otlp import length_delimited, otlp_request, resource_metrics
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 100
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
max_file_age_s = 0.3
"""
NOT_OTLP = b"\x8a\xff not an OTLP payload"
UNDECODABLE = re.compile(r'^kip714_landing_undecodable_total\{exporter="landing"\} (\S+)$', re.M)
WAIT_S = 30.0


async def scrape_undecodable(server: Server) -> float | None:
    assert server.http_address is not None
    host, port = server.http_address
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{host}:{port}/metrics") as answer,
    ):
        match = UNDECODABLE.search(await answer.text())
    return None if match is None else float(match.group(1))


async def counted_undecodable(server: Server) -> float | None:
    """The landing's count once it reaches 1, or what it was when WAIT_S ran out."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    counted = await scrape_undecodable(server)
    while counted != 1.0 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
        counted = await scrape_undecodable(server)
    return counted


async def test_an_undecodable_push_is_counted_on_metrics_and_named_by_log_status(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    async with running(tmp_path, CONFIG) as server:
        assert server.listener is not None
        client = await WireClient.connect(*server.listener.bound_address, "undecodable")
        try:
            await client.api_versions()
            subscription = await client.subscribe()
            answers = []
            for payload in (otlp_payload("org.apache.kafka.good"), NOT_OTLP):
                answer = await client.push(
                    subscription.client_instance_id, subscription.subscription_id, payload
                )
                answers.append(answer.error_code)
                await asyncio.sleep(0.15)  # the push interval
        finally:
            await client.close()
        counted = await counted_undecodable(server)

    assert answers == [ErrorCode.NONE, ErrorCode.NONE]  # Kafka's rule: not parsed on push
    assert counted == 1.0
    assert {r["metric_name"] for r in read_table(data_dir).to_pylist()} == {"org.apache.kafka.good"}
    text = kip714_log("status", "--data-dir", str(data_dir))
    assert text.returncode == 0, text.stderr
    assert "undecodable payloads: 1 (not OTLP; the landings skip them): offsets 1" in text.stdout
    document = json.loads(kip714_log("status", "--data-dir", str(data_dir), "--json").stdout)
    assert document["undecodable"] == {"count": 1, "offsets": [1]}


async def test_an_otlp_request_whose_metrics_do_not_decode_is_accepted_then_counted(
    tmp_path: Path,
) -> None:
    """The OTLP door decodes resources only (telemetry.http.otlp_wire); the landing the rest."""
    good = otlp_request(resource_metrics({"service.name": "good"}, "otlp.good"))
    resource = resource_metrics({"service.name": "bad"}, "otlp.bad").resource
    bad = length_delimited(
        1, length_delimited(1, resource.SerializeToString()) + length_delimited(2, NOT_OTLP)
    )
    data_dir = tmp_path / "data"
    async with running(tmp_path, CONFIG) as server:
        assert server.http_address is not None
        host, port = server.http_address
        statuses = []
        async with aiohttp.ClientSession() as session:
            for body in (good, bad):
                async with session.post(
                    f"http://{host}:{port}/v1/metrics",
                    data=body,
                    headers={"Content-Type": "application/x-protobuf"},
                ) as answer:
                    statuses.append(answer.status)
        counted = await counted_undecodable(server)

    assert statuses == [200, 200]
    assert counted == 1.0
    assert {r["metric_name"] for r in read_table(data_dir).to_pylist()} == {"otlp.good"}
