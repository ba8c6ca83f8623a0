"""The HTTP admin API refuses what a web page in a browser could send, and draws mutation quota."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import aiohttp

from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

STATIC = '[subscriptions.base]\nmetrics = ["org.apache.kafka.producer."]\n"interval.ms" = 60000\n'
CHANGE = json.dumps({"set": {"interval.ms": 1000}})


async def send(
    server: Server,
    method: str,
    path: str,
    *,
    body: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], dict[str, str]]:
    assert server.http_address is not None
    host, port = server.http_address
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, f"http://{host}:{port}{path}", data=body, headers=headers or {}
        ) as response,
    ):
        return response.status, await response.json(), dict(response.headers)


def _interval(server: Server) -> int:
    base = server.manager.subscriptions.get("base")
    assert base is not None
    return base.interval_ms


def _stored(server: Server) -> int:
    assert server.admin is not None
    return server.admin.store.next_offset


async def test_cross_site_changes_change_nothing(tmp_path: Path) -> None:
    json_type = {"Content-Type": "application/json"}
    async with running(tmp_path, STATIC) as server:
        text_plain = await send(
            server, "POST", "/admin/subscriptions/base", body=CHANGE,
            headers={"Content-Type": "text/plain"},
        )  # fmt: skip
        form = await send(
            server, "POST", "/admin/quotas", body="entity=x",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )  # fmt: skip
        no_type_delete = await send(server, "DELETE", "/admin/quotas?user=alice")
        cross_origin = await send(
            server, "POST", "/admin/subscriptions/base", body=CHANGE,
            headers={**json_type, "Origin": "https://evil.example"},
        )  # fmt: skip
        cross_site = await send(
            server, "POST", "/admin/subscriptions/base", body=CHANGE,
            headers={**json_type, "Sec-Fetch-Site": "cross-site"},
        )  # fmt: skip
        origin_read = await send(
            server, "GET", "/admin/quotas", headers={"Origin": "http://127.0.0.1"}
        )
        unchanged, stored = _interval(server), _stored(server)
        same_origin = await send(
            server, "POST", "/admin/subscriptions/base", body=CHANGE,
            headers={**json_type, "Sec-Fetch-Site": "same-origin"},
        )  # fmt: skip
        changed = _interval(server)
    for refused in (text_plain, form, no_type_delete, cross_origin, cross_site, origin_read):
        assert refused[0] == 403, refused
    assert "Content-Type: application/json" in text_plain[1]["error"]
    assert "Origin" in cross_origin[1]["error"]
    assert (unchanged, stored) == (60000, 0)
    assert same_origin[0] == 200
    assert changed == 1000


async def test_a_foreign_host_is_refused_unless_allowed(tmp_path: Path) -> None:
    config = STATIC + '[admin]\nallowed_hosts = ["Kip714.LAN"]\n'
    async with running(tmp_path, config) as server:
        assert server.http_address is not None
        port = server.http_address[1]
        rebound = await send(
            server, "GET", "/admin/quotas", headers={"Host": f"evil.example:{port}"}
        )
        own = await send(server, "GET", "/admin/quotas", headers={"Host": f"127.0.0.1:{port}"})
        name = await send(server, "GET", "/admin/quotas", headers={"Host": f"localhost:{port}"})
        allowed = await send(server, "GET", "/admin/quotas", headers={"Host": "kip714.lan"})
        change = await send(
            server, "POST", "/admin/subscriptions/base", body=CHANGE,
            headers={"Host": "evil.example", "Content-Type": "application/json"},
        )  # fmt: skip
        interval = _interval(server)
    assert rebound[0] == 403 and "allowed_hosts" in rebound[1]["error"]
    assert (own[0], name[0], allowed[0]) == (200, 200, 200)
    assert change[0] == 403
    assert interval == 60000


async def test_with_security_the_token_is_needed_even_on_loopback(tmp_path: Path) -> None:
    config = STATIC + '[admin]\ntoken = "s3cret"\n[security]\nsuper_users = ["User:admin"]\n'
    async with running(tmp_path, config) as server:
        anonymous_read = await send(server, "GET", "/admin/subscriptions")
        anonymous_change = await send(
            server, "POST", "/admin/subscriptions/base", body=CHANGE,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        interval = _interval(server)
        with_token = await send(
            server, "POST", "/admin/subscriptions/base", body=CHANGE,
            headers={"Authorization": "Bearer s3cret", "Content-Type": "application/json"},
        )  # fmt: skip
        changed = _interval(server)
    assert anonymous_read[0] == 401
    assert anonymous_change[0] == 401
    assert "super_users" in anonymous_change[1]["error"]
    assert interval == 60000
    assert with_token[0] == 200
    assert changed == 1000


async def test_http_admin_changes_draw_the_mutation_quota(tmp_path: Path) -> None:
    config = STATIC + '[[quotas.clients]]\nuser = "ANONYMOUS"\ncontroller_mutation_rate = 0.1\n'
    json_type = {"Content-Type": "application/json"}
    async with running(tmp_path, config) as server:
        answers = [
            await send(
                server,
                "POST",
                "/admin/subscriptions/base",
                body=json.dumps({"set": {"interval.ms": interval}}),
                headers=json_type,
            )
            for interval in range(1000, 1008)
        ]
        validated = await send(
            server, "POST", "/admin/subscriptions/base",
            body=json.dumps({"set": {"interval.ms": 5000}, "validate_only": True}),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        stored = _stored(server)
    statuses = [status for status, _, _ in answers]
    accepted = statuses.count(200)
    assert 1 <= accepted < len(statuses)
    assert set(statuses) == {200, 429}
    assert statuses == sorted(statuses)  # once in deficit, every later change is refused
    throttled = answers[accepted]
    assert throttled[1]["error_code"] == 89
    assert int(throttled[2]["Retry-After"]) >= 1
    assert stored == accepted  # a refused change writes nothing
    assert validated[0] == 200  # validate_only draws nothing
