"""``kip714 quotas advise --apply --http URL``: kip714's own push quotas from the push sizes in
the lake, set through the running server's HTTP admin API and read back."""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from exporters.iceberg.lake import open_catalog, open_table
from exporters.iceberg.schema import METRICS_TABLE, lake_metrics_schema
from exporters.iceberg.settings import lake_location
from telemetry.cli.main import main
from tests.telemetry.admin.test_http_admin import call
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

T0 = dt.datetime(2026, 11, 25, 10, 0, tzinfo=dt.UTC)
CONFIG = '[admin]\ntoken = "s3cret"\n'


def _lake_with_push_sizes(data: Path) -> None:
    """alice's p1 pushes 30,000 bytes (90,000 decoded) every 10 s, bob's p2 6,000 (12,000):
    3,000 and 600 B/s as received. Every push is two rows that repeat its sizes."""
    location = lake_location({}, data)
    table = open_table(open_catalog(location), location.namespace, METRICS_TABLE)
    schema = lake_metrics_schema()  # with push_bytes and push_decoded_bytes
    rows: list[dict[str, Any]] = []
    for second in range(0, 600, 10):
        at = T0 + dt.timedelta(seconds=second)
        for client, user, sent, decoded in (
            ("p1", "alice", 30_000, 90_000),
            ("p2", "bob", 6_000, 12_000),
        ):
            for metric in (
                "org.apache.kafka.producer.record.send.rate",
                "org.apache.kafka.producer.connection.creation.rate",
            ):
                rows.append(
                    {
                        "time": at,
                        "received_time": at,
                        "metric_name": metric,
                        "metric_type": "gauge",
                        "value": 0.0,
                        "client_id": client,
                        "client_instance_id": f"{client}-instance",
                        "principal": f"User:{user}",
                        "client_software_name": "librdkafka",
                        "client_software_version": "2.16.0",
                        "push_bytes": sent,
                        "push_decoded_bytes": decoded,
                    }
                )
    table.append(pa.Table.from_pylist(rows, schema=schema))


async def kip714(*argv: str) -> int:
    return await asyncio.wait_for(asyncio.to_thread(main, list(argv)), 60)


def _url(server: Server) -> str:
    assert server.http_address is not None
    host, port = server.http_address
    return f"http://{host}:{port}"


async def _dynamic(server: Server) -> dict[tuple[tuple[str, str], ...], dict[str, float]]:
    status, body = await call(server, "GET", "/admin/quotas", token="s3cret")
    assert status == 200
    return {tuple(sorted(q["entity"].items())): q["dynamic"] for q in body["quotas"]}


async def test_apply_sets_the_push_quotas_and_reads_them_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "lake-data"
    _lake_with_push_sizes(data)
    advise = ("quotas", "advise", "--data-dir", str(data))
    async with running(tmp_path, CONFIG) as server:
        url = _url(server)
        dry = await kip714(*advise, "--http", url)
        dry_out = capsys.readouterr().out
        after_dry = await _dynamic(server)
        applied = await kip714(*advise, "--http", url, "--token", "s3cret", "--apply")
        applied_out = capsys.readouterr().out
        defaults = await kip714(
            *advise, "--http", url, "--token", "s3cret", "--apply", "--level", "5"
        )
        capsys.readouterr()
        in_force = await _dynamic(server)
    assert dry == 0
    lines = dry_out.splitlines()
    p1 = next(line for line in lines if line.startswith("push_byte_rate") and " p1 " in line)
    assert p1.split()[3:5] == ["3,000", "4,500"]
    decoded = next(
        line for line in lines if line.startswith("push_decoded_byte_rate") and " p1 " in line
    )
    assert decoded.split()[3:5] == ["9,000", "13,500"]
    assert (
        f"kip714 quotas --http {url} --alter --entity-type users --entity-name alice "
        "--entity-type clients --entity-name p1 "
        "--add-config push_byte_rate=4500,push_decoded_byte_rate=13500" in dry_out
    )
    assert "kafka-configs.sh" not in dry_out  # librdkafka: no Kafka quota to advise
    assert after_dry == {}  # a dry run sets nothing
    assert applied == 0
    assert (
        "set user=alice, client-id=p1: push_byte_rate=4500, push_decoded_byte_rate=13500 "
        "(read back)" in applied_out
    )
    assert defaults == 0
    assert in_force == {
        (("client-id", "p1"), ("user", "alice")): {
            "push_byte_rate": 4500.0,
            "push_decoded_byte_rate": 13500.0,
        },
        (("client-id", "p2"), ("user", "bob")): {
            "push_byte_rate": 900.0,
            "push_decoded_byte_rate": 1800.0,
        },
        # Level 5: one quota for every (user, client-id): the busiest client's proposal.
        (("client-id", "<default>"), ("user", "<default>")): {
            "push_byte_rate": 4500.0,
            "push_decoded_byte_rate": 13500.0,
        },
    }


async def test_a_refused_token_and_an_unreachable_server_are_one_line_and_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "lake-data"
    _lake_with_push_sizes(data)
    advise = ("quotas", "advise", "--data-dir", str(data), "--apply")
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        unreachable = f"http://127.0.0.1:{closed.getsockname()[1]}"
    async with running(tmp_path, CONFIG) as server:
        refused = await kip714(*advise, "--http", _url(server), "--token", "wrong")
        refusal = capsys.readouterr().err
        status, _ = await call(server, "GET", "/admin/quotas", token="s3cret")  # still answers
        in_force = await _dynamic(server)
    gone = await kip714(*advise, "--http", unreachable, "--token", "s3cret")
    gone_err = capsys.readouterr().err
    without_http = await kip714(*advise)
    usage = capsys.readouterr().err
    assert refused == 2 and len(refusal.strip().splitlines()) == 1 and "HTTP 401" in refusal
    assert status == 200 and in_force == {}
    assert gone == 2 and len(gone_err.strip().splitlines()) == 1 and unreachable in gone_err
    assert without_http == 2 and usage.strip() == "kip714 quotas advise: --apply needs --http URL"
