"""``kip714 subscriptions`` and ``kip714 quotas`` against a running server, over HTTP and Kafka."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from telemetry.admin.cli import split_configs
from telemetry.cli.main import main
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

STATIC = '[subscriptions.base]\nmetrics = ["org.apache.kafka.producer."]\n"interval.ms" = 60000\n'


def both_ways(server: Server) -> list[list[str]]:
    assert server.http_address is not None and server.listener is not None
    http_host, http_port = server.http_address
    kafka_host, kafka_port = server.listener.bound_address
    return [
        ["--http", f"http://{http_host}:{http_port}"],
        ["--bootstrap-server", f"{kafka_host}:{kafka_port}"],
    ]


async def kip714(*argv: str) -> int:
    return await asyncio.wait_for(asyncio.to_thread(main, list(argv)), 60)


def test_add_config_splits_like_kafka_configs() -> None:
    assert split_configs("interval.ms=1000,metrics=[a.,b.],match=[client_id=x-.*]") == {
        "interval.ms": "1000",
        "metrics": "a.,b.",
        "match": "client_id=x-.*",
    }


async def test_subscriptions_alter_describe_and_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running(tmp_path, STATIC) as server:
        http, kafka = both_ways(server)
        altered = await kip714(
            "subscriptions", *http, "--alter", "--name", "new",
            "--add-config", "interval.ms=1000,metrics=[org.apache.kafka.,other.]",
        )  # fmt: skip
        capsys.readouterr()
        described = [
            await kip714("subscriptions", *where, "--describe", "--name", "new")
            for where in (http, kafka)
        ]
        descriptions = capsys.readouterr().out
        refused = await kip714(
            "subscriptions", *kafka, "--alter", "--name", "new", "--add-config", "interval.ms=5"
        )
        refusal = capsys.readouterr().err
        deleted = await kip714("subscriptions", *kafka, "--delete", "--name", "new")
        listed = await kip714("subscriptions", *http, "--list")
        names = capsys.readouterr().out
        in_force = server.manager.subscriptions.get("new")
    assert (altered, described, refused, deleted, listed) == (0, [0, 0], 1, 0, 0)
    expected = (
        "Dynamic configs for client-metric new are:\n"
        "  metrics=org.apache.kafka.,other. source=CLIENT_METRICS_CONFIG\n"
        "  interval.ms=1000 source=CLIENT_METRICS_CONFIG\n"
    )
    assert descriptions == expected * 2
    assert refusal == (
        "kip714 subscriptions: refused: INVALID_REQUEST: Invalid value 5 for interval.ms, "
        "interval must be between 100 and 3600000 (1 hour)\n"
    )
    assert names.splitlines()[-1] == "base"
    assert in_force is None


async def test_quotas_alter_and_describe_like_kafka_configs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running(tmp_path, STATIC) as server:
        http, kafka = both_ways(server)
        codes = [
            await kip714(
                "quotas", *kafka, "--alter", "--entity-type", "users", "--entity-name", "alice",
                "--entity-type", "clients", "--entity-default",
                "--add-config", "producer_byte_rate=1024,request_percentage=12.5",
            ),
            await kip714(
                "quotas", *http, "--alter", "--entity-type", "ips", "--entity-default",
                "--add-config", "connection_creation_rate=3",
            ),
            await kip714(
                "quotas", *http, "--describe", "--entity-type", "users", "--entity-name", "alice"
            ),
            await kip714(
                "quotas", *kafka, "--describe", "--entity-type", "ips", "--entity-default"
            ),
        ]  # fmt: skip
        out = capsys.readouterr().out
        refused = await kip714(
            "quotas", *http, "--alter", "--entity-type", "users", "--entity-name", "bob",
            "--add-config", "consumer_byte_rate=5",
        )  # fmt: skip
        refusal = capsys.readouterr().err
        validated = await kip714(
            "quotas", *kafka, "--alter", "--validate-only", "--entity-type", "users",
            "--entity-name", "carol", "--add-config", "request_percentage=1",
        )  # fmt: skip
        entities = {c.entity for c in server.enforcement.quota_settings.clients}
    assert codes == [0, 0, 0, 0]
    assert (
        "Quota configs for client-id=<default>, user=alice are "
        "push_byte_rate=1024.0, request_percentage=12.5"
    ) in out
    assert "Quota configs for ip=<default> are connection_creation_rate=3.0" in out
    assert refused == 1
    assert refusal == (
        "kip714 quotas: refused: INVALID_REQUEST: Invalid configuration key consumer_byte_rate\n"
    )
    assert validated == 0
    assert entities == {("alice", "<default>")}


async def test_unreachable_server_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = await kip714(
        "subscriptions", "--bootstrap-server", "127.0.0.1:1", "--describe", "--name", "x"
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("kip714 subscriptions: 127.0.0.1:1: ") and err.count("\n") == 1
