"""The HTTP admin API on a running server: subscriptions and quotas in JSON, authenticated."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import aiohttp

from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

STATIC = (
    '[subscriptions.base]\nmetrics = ["org.apache.kafka.producer."]\n"interval.ms" = 60000\n'
    '[[quotas.clients]]\nuser = "alice"\npush_byte_rate = 1000\nrequest_percentage = 5.0\n'
)


async def call(
    server: Server, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    assert server.http_address is not None
    host, port = server.http_address
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if method == "DELETE":  # no body, but an admin change is JSON (a browser cannot send it)
        headers["Content-Type"] = "application/json"
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, f"http://{host}:{port}{path}", json=body, headers=headers
        ) as response,
    ):
        return response.status, await response.json()


async def test_subscriptions_alter_describe_validate_and_delete(tmp_path: Path) -> None:
    async with running(tmp_path, STATIC) as server:
        altered = await call(
            server, "POST", "/admin/subscriptions/base", {"set": {"interval.ms": 1000}}
        )
        listed = await call(server, "GET", "/admin/subscriptions")
        refused = await call(
            server, "POST", "/admin/subscriptions/base", {"set": {"interval.ms": "5"}}
        )
        validated = await call(
            server,
            "POST",
            "/admin/subscriptions/new",
            {"set": {"metrics": "*"}, "validate_only": True},
        )
        missing = await call(server, "GET", "/admin/subscriptions/new")
        in_force_altered = server.manager.subscriptions.get("base")
        deleted = await call(server, "DELETE", "/admin/subscriptions/base")
        in_force_deleted = server.manager.subscriptions.get("base")
    status, body = altered
    assert status == 200
    assert body["configs"]["interval.ms"] == {
        "value": "1000",
        "source": "CLIENT_METRICS_CONFIG",
        "synonyms": [
            {"value": "1000", "source": "CLIENT_METRICS_CONFIG"},
            {"value": "60000", "source": "STATIC_BROKER_CONFIG"},
        ],
    }
    assert [s["name"] for s in listed[1]["subscriptions"]] == ["base"]
    assert refused == (
        400,
        {
            "error": "Invalid value 5 for interval.ms, interval must be between 100 and "
            "3600000 (1 hour)",
            "error_code": 42,
        },
    )
    assert validated[0] == 200 and validated[1]["validate_only"] is True
    assert missing[0] == 404
    assert in_force_altered is not None and in_force_altered.interval_ms == 1000
    assert deleted[0] == 200
    assert deleted[1]["configs"]["interval.ms"]["source"] == "STATIC_BROKER_CONFIG"
    assert in_force_deleted is not None and in_force_deleted.interval_ms == 60000


async def test_quotas_show_each_layer_and_alter_without_reset(tmp_path: Path) -> None:
    async with running(tmp_path, STATIC) as server:
        altered = await call(
            server,
            "POST",
            "/admin/quotas",
            {"entity": {"user": "alice"}, "set": {"push_byte_rate": 2048}},
        )
        default = await call(
            server,
            "POST",
            "/admin/quotas",
            {"entity": {"client-id": None}, "set": {"request_percentage": 50}},
        )
        bad = await call(
            server, "POST", "/admin/quotas", {"entity": {"user": "x"}, "set": {"nope": 1}}
        )
        alice = await call(server, "GET", "/admin/quotas?user=alice")
        in_force = {c.entity: c for c in server.enforcement.quota_settings.clients}
        removed = await call(server, "DELETE", "/admin/quotas?user=alice")
        after_delete = {c.entity: c for c in server.enforcement.quota_settings.clients}
    assert altered == (
        200,
        {
            "entity": {"user": "alice"},
            "dynamic": {"push_byte_rate": 2048.0},
            "validate_only": False,
        },
    )
    assert default[0] == 200 and default[1]["entity"] == {"client-id": "<default>"}
    assert bad == (400, {"error": "Invalid configuration key nope", "error_code": 42})
    assert alice == (
        200,
        {
            "quotas": [
                {
                    "entity": {"user": "alice"},
                    "static": {"push_byte_rate": 1000.0, "request_percentage": 5.0},
                    "dynamic": {"push_byte_rate": 2048.0},
                    "in_force": {"push_byte_rate": 2048.0, "request_percentage": 5.0},
                }
            ]
        },
    )
    assert in_force[("alice", None)].push_byte_rate == 2048.0
    assert in_force[(None, "<default>")].request_percentage == 50.0
    assert removed[0] == 200
    assert after_delete[("alice", None)].push_byte_rate == 1000.0


async def test_the_token_is_required_when_configured(tmp_path: Path) -> None:
    async with running(tmp_path, STATIC + '[admin]\ntoken = "s3cret"\n') as server:
        anonymous = await call(server, "GET", "/admin/subscriptions")
        wrong = await call(server, "GET", "/admin/subscriptions", token="guess")
        right = await call(server, "GET", "/admin/subscriptions", token="s3cret")
        unauthorised_change = await call(
            server, "POST", "/admin/subscriptions/base", {"set": {"interval.ms": 1000}}
        )
        base = server.manager.subscriptions.get("base")
    assert anonymous[0] == 401
    assert wrong[0] == 401
    assert right[0] == 200
    assert unauthorised_change[0] == 401
    assert base is not None and base.interval_ms == 60000


async def test_bad_bodies_are_400_and_bounded(tmp_path: Path) -> None:
    async with running(tmp_path, STATIC) as server:
        not_object = await call(server, "POST", "/admin/subscriptions/base", [1, 2])
        unknown = await call(server, "POST", "/admin/subscriptions/base", {"sett": {}})
        huge = await call(
            server,
            "POST",
            "/admin/subscriptions/base",
            {"set": {"metrics": "x" * (128 * 1024)}},
        )
        offset = server.admin.store.next_offset if server.admin else -1
    assert not_object[0] == 400
    assert unknown == (400, {"error": "unknown fields: sett"})
    assert huge[0] == 400 and "larger than" in huge[1]["error"]
    assert offset == 0
