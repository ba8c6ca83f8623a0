"""The principal, not the door, decides the quota entity: HTTP ingestion under allow_anonymous
= false needs a client certificate or Basic credentials; anonymous is 401, charged to nobody."""

from __future__ import annotations

import asyncio
import base64
from typing import TYPE_CHECKING

import aiohttp

from telemetry.metastore import UserScramCredentialRecord
from telemetry.security import ScramMechanism, derive_credential
from telemetry.security.settings import hash_password
from tests.telemetry.http.test_http_otlp import PROTOBUF, otlp_request, resource_metrics
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server


def _config() -> str:
    alice = hash_password("alice-pw", iterations=5000).encoded()
    return (
        "[security]\nallow_anonymous = false\nfailed_authentication_delay_ms = 0\n"
        f'[security.plain_users]\nalice = "{alice}"\n'
        '[[quotas.clients]]\nclient_id = "orders-service"\npush_byte_rate = 100000\n'
    )


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {**PROTOBUF, "Authorization": f"Basic {token}"}


async def _push(server: Server, body: bytes, headers: dict[str, str]) -> int:
    assert server.http_address is not None
    host, port = server.http_address
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://{host}:{port}/v1/metrics", data=body, headers=headers) as response,
    ):
        await response.read()
        return response.status


async def test_anonymous_pushes_are_401_and_leave_alice_unthrottled(tmp_path: Path) -> None:
    big = otlp_request(resource_metrics({"service.name": "orders-service"}, "m", 5000))
    small = otlp_request(resource_metrics({"service.name": "orders-service"}, "m", 1))
    assert len(big) > 100_000
    async with running(tmp_path, _config()) as server:
        anonymous = [await _push(server, big, PROTOBUF) for _ in range(20)]
        wrong = await _push(server, small, _basic("alice", "guess"))
        unknown = await _push(server, small, _basic("mallory", "guess"))
        alice = [await _push(server, small, _basic("alice", "alice-pw")) for _ in range(3)]
    assert anonymous == [401] * 20
    assert (wrong, unknown) == (401, 401)
    assert alice == [200, 200, 200]  # 2 MB of anonymous pushes were charged to nobody


async def test_scram_credentials_check_basic_too(tmp_path: Path) -> None:
    credential = derive_credential(ScramMechanism.SCRAM_SHA_512, "bob-pw", iterations=4096)
    record = UserScramCredentialRecord(
        name="bob",
        mechanism=ScramMechanism.SCRAM_SHA_512.mechanism_id,
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=credential.iterations,
        secured=True,
    )
    small = otlp_request(resource_metrics({"service.name": "b"}, "m", 1))
    async with running(tmp_path, _config()) as server:
        assert server.metastore is not None
        await asyncio.to_thread(server.metastore.append, [record])
        right = await _push(server, small, _basic("bob", "bob-pw"))
        wrong = await _push(server, small, _basic("bob", "bob-wrong"))
        assert server.password_checks is not None
        checked = server.password_checks.stats.completed
    assert (right, wrong) == (200, 401)
    assert checked == 2  # both hashed on the password-check pool


async def test_every_ingestion_route_is_guarded_and_the_others_are_not(tmp_path: Path) -> None:
    """The guard sits on each ingestion route (not a middleware): all three, nothing else."""
    async with running(tmp_path, _config()) as server, aiohttp.ClientSession() as session:
        assert server.http_address is not None
        host, port = server.http_address
        base = f"http://{host}:{port}"
        statuses: dict[str, int] = {}
        for path in ("/v1/metrics", "/v1/telemetry/subscriptions", "/v1/telemetry/push"):
            async with session.post(base + path, data=b"", headers=PROTOBUF) as response:
                statuses[path] = response.status
                challenge = response.headers.get("WWW-Authenticate", "")
                assert challenge.startswith("Basic"), (path, challenge)
        for path in ("/healthz", "/metrics"):
            async with session.get(base + path) as response:
                statuses[path] = response.status
    assert statuses == {
        "/v1/metrics": 401,
        "/v1/telemetry/subscriptions": 401,
        "/v1/telemetry/push": 401,
        "/healthz": 200,
        "/metrics": 200,
    }
