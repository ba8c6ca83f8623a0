"""``/metrics`` under a flood of quota entities: bounded series, rendered off the loop, guarded.

Every OTLP resource with its own ``service.name`` is a quota entity; with a
default byte quota each gets sensors. ``/metrics`` shows at most ``[limits]
max_entity_series`` of them one by one and sums the rest as ``<other>``;
the Kafka listener answers while scrapes run; ``[http] metrics_auth =
"admin"`` makes ``/metrics`` need the admin token.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

import aiohttp
import pytest

from telemetry.errors import ConfigError
from telemetry.server.config import load_settings
from tests.telemetry.http.test_http_otlp import PROTOBUF, otlp_request, resource_metrics
from tests.telemetry.kafka_wire_client import WireClient
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

#: Resources per request: within the OTLP door's per-request resource bound.
_PER_REQUEST = 1000
_ENTITIES = 20_000


def _config(out: Path, extra: str = "") -> str:
    return (
        '[[quotas.clients]]\nclient_id = "<default>"\npush_byte_rate = 1000000000\n'
        f'[exporters.out]\ntype = "jsonl"\n[exporters.out.options]\npath = "{out}"\n{extra}'
    )


def _base(server: Server) -> str:
    assert server.http_address is not None
    host, port = server.http_address
    return f"http://{host}:{port}"


async def _make_entities(server: Server, count: int) -> None:
    async with aiohttp.ClientSession() as session:
        for first in range(0, count, _PER_REQUEST):
            body = otlp_request(
                *(
                    resource_metrics({"service.name": f"svc-{n}"}, "m", 1)
                    for n in range(first, first + _PER_REQUEST)
                )
            )
            async with session.post(
                _base(server) + "/v1/metrics", data=body, headers=PROTOBUF
            ) as response:
                assert response.status == 200, await response.text()


def _byte_rate_entities(server: Server) -> set[str]:
    return {
        name.tag_map.get("client-id", "")
        for name in server.enforcement.metrics.metrics
        if name.group == "Produce" and name.name == "byte-rate"
    }


async def test_metrics_shows_at_most_max_entity_series_and_kafka_answers_meanwhile(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, _config(tmp_path / "out.jsonl")) as server:
        await _make_entities(server, _ENTITIES)
        assert len(_byte_rate_entities(server)) >= _ENTITIES
        assert server.listener is not None
        kafka = await WireClient.connect(*server.listener.bound_address, client_id="probe")
        scrapes: list[str] = []
        answered = 0

        async def scrape(session: aiohttp.ClientSession) -> None:
            for _ in range(2):
                async with session.get(_base(server) + "/metrics") as response:
                    assert response.status == 200
                    scrapes.append(await response.text())

        async def probe() -> None:
            nonlocal answered
            while len(scrapes) < 6:
                async with asyncio.timeout(10):  # generous: liveness, not speed
                    await kafka.api_versions()
                answered += 1
                await asyncio.sleep(0.01)

        try:
            async with aiohttp.ClientSession() as session, asyncio.timeout(300):
                await asyncio.gather(*(scrape(session) for _ in range(3)), probe())
        finally:
            await kafka.close()
    assert answered > 0
    for text in scrapes:
        series = re.findall(r'^kip714_quota_push_byte_rate\{[^}]*client_id="([^"]*)"', text, re.M)
        assert len(series) <= 10_000 + 1
        assert series.count("<other>") == 1
        (entities,) = re.findall(
            r'^kip714_quota_entities_folded\{kind="entities"\} (\S+)$', text, re.M
        )
        assert float(entities) >= _ENTITIES - 10_000
        assert len(text) < 4 * 1024 * 1024


async def test_max_entity_series_is_configurable(tmp_path: Path) -> None:
    config = _config(tmp_path / "out.jsonl", "[limits]\nmax_entity_series = 10\n")
    async with running(tmp_path, config) as server, aiohttp.ClientSession() as session:
        await _make_entities(server, _PER_REQUEST)
        async with session.get(_base(server) + "/metrics") as response:
            text = await response.text()
    series = re.findall(r'^kip714_quota_push_byte_rate\{[^}]*client_id="([^"]*)"', text, re.M)
    assert len(series) == 10 + 1
    (entities,) = re.findall(r'^kip714_quota_entities_folded\{kind="entities"\} (\S+)$', text, re.M)
    assert float(entities) >= _PER_REQUEST - 10


async def test_metrics_auth_admin_needs_the_admin_token(tmp_path: Path) -> None:
    config = _config(
        tmp_path / "out.jsonl", '[http]\nmetrics_auth = "admin"\n[admin]\ntoken = "s3cret"\n'
    )
    async with running(tmp_path, config) as server, aiohttp.ClientSession() as session:
        url = _base(server) + "/metrics"
        async with session.get(url) as response:
            anonymous = response.status
        async with session.get(url, headers={"Authorization": "Bearer wrong"}) as response:
            wrong = response.status
        async with session.get(url, headers={"Authorization": "Bearer s3cret"}) as response:
            admitted = response.status
            text = await response.text()
        async with session.get(_base(server) + "/healthz") as response:
            health = response.status
    assert (anonymous, wrong, admitted, health) == (401, 401, 200, 200)
    assert 'kip714_requests_refused_total{door="metrics",reason="metrics_auth"} 2.0' in text


def test_metrics_auth_is_checked_at_load(tmp_path: Path) -> None:
    path = tmp_path / "kip714.toml"
    path.write_text('[http]\nmetrics_auth = "admin"\n')
    with pytest.raises(ConfigError, match=r"http\.metrics_auth"):
        load_settings(path)
    path.write_text('[http]\nmetrics_auth = "everyone"\n')
    with pytest.raises(ConfigError, match=r"http\.metrics_auth"):
        load_settings(path)
    path.write_text("[limits]\nmax_entity_series = 0\n")
    with pytest.raises(ConfigError, match=r"limits\.max_entity_series"):
        load_settings(path)
