"""HTTP Basic under attack: a proven credential is remembered (and forgotten when it changes),
a 401 closes its connection, the password-check queue is bounded, and an unknown user's attempt
costs the hash a known user's does."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from typing import TYPE_CHECKING

import aiohttp

from telemetry.metastore import UserScramCredentialRecord
from telemetry.security import ScramMechanism, derive_credential, salted_password
from telemetry.security.settings import hash_password
from telemetry.wire.admin_apis import AdminApiKey
from telemetry.wire.scram_messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from tests.telemetry.http.test_http_otlp import PROTOBUF, otlp_request, resource_metrics
from tests.telemetry.kafka.test_kafka_security_clients import sasl_frame
from tests.telemetry.kafka.test_kafka_security_listener import login
from tests.telemetry.kafka_wire_client import WireClient
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest

    from telemetry.server.bootstrap import Server

SMALL = otlp_request(resource_metrics({"service.name": "basic"}, "m", 1))
_SHA512 = ScramMechanism.SCRAM_SHA_512


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {**PROTOBUF, "Authorization": f"Basic {token}"}


def _url(server: Server, path: str = "/v1/metrics") -> str:
    assert server.http_address is not None
    host, port = server.http_address
    return f"http://{host}:{port}{path}"


async def _push(server: Server, user: str, password: str) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(_url(server), data=SMALL, headers=_basic(user, password)) as response,
    ):
        await response.read()
        return response.status


def _hashes(server: Server) -> int:
    assert server.password_checks is not None
    return server.password_checks.stats.completed


ADMIN_CONFIG = """
[security]
allow_anonymous = false
super_users = ["User:admin"]
failed_authentication_delay_ms = 0
[security.plain_users]
admin = "{admin}"
"""


def _admin_config() -> str:
    return ADMIN_CONFIG.format(admin=hash_password("admin-pw", iterations=5000).encoded())


async def _alter(server: Server, request: AlterUserScramCredentialsRequest) -> None:
    """Through the admin plane: AlterUserScramCredentials on the Kafka listener, as admin."""
    client, _ = await login(server, "admin", "admin-pw")
    try:
        _, answer = await sasl_frame(client, AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, request)
    finally:
        await client.close()
    assert isinstance(answer, AlterUserScramCredentialsResponse)
    assert all(result.error_code == 0 for result in answer.results), answer


def _set_password(name: str, password: str) -> AlterUserScramCredentialsRequest:
    salt = b"salt-" + password.encode()
    return AlterUserScramCredentialsRequest(
        upsertions=(
            ScramCredentialUpsertion(
                name=name,
                mechanism=_SHA512.mechanism_id,
                iterations=4096,
                salt=salt,
                salted_password=salted_password(_SHA512, password, salt, 4096),
            ),
        )
    )


async def test_a_proven_credential_skips_the_hash_until_the_admin_plane_changes_it(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, _admin_config()) as server:
        await _alter(server, _set_password("bob", "bob-1"))
        before = _hashes(server)
        first = await _push(server, "bob", "bob-1")
        second = await _push(server, "bob", "bob-1")
        third = await _push(server, "bob", "bob-1")
        assert (first, second, third) == (200, 200, 200)
        assert _hashes(server) - before == 1  # the second and third were remembered
        authenticator = server.http_authenticator
        assert authenticator is not None
        assert authenticator.stats.memo_hits == 2
        wrong = await _push(server, "bob", "guess")
        assert wrong == 401  # a wrong password is never remembered: it is hashed
        assert _hashes(server) - before == 2

        await _alter(server, _set_password("bob", "bob-2"))
        checked = _hashes(server)
        old = await _push(server, "bob", "bob-1")  # at once, not after the memo's 60 s
        new = await _push(server, "bob", "bob-2")
        assert (old, new) == (401, 200)
        assert _hashes(server) - checked == 2
        assert authenticator.stats.memo_invalidated >= 1

        deletion = AlterUserScramCredentialsRequest(
            deletions=(ScramCredentialDeletion(name="bob", mechanism=_SHA512.mechanism_id),)
        )
        await _alter(server, deletion)
        assert await _push(server, "bob", "bob-2") == 401


async def _raw_post(
    host: str, port: int, headers: dict[str, str], body: bytes, *, pause_at: int
) -> tuple[bytes, bytes]:
    """POST ``body`` in two parts with a pause between; the response head and what follows."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        lines = ["POST /v1/metrics HTTP/1.1", f"Host: {host}:{port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body[:pause_at])
        await writer.drain()
        await asyncio.sleep(0.2)  # the server has answered the headers' credentials by now
        writer.write(body[pause_at:])
        await writer.drain()
        async with asyncio.timeout(30):
            head = await reader.readuntil(b"\r\n\r\n")
            rest = await reader.read()  # to EOF: the server closes
        return head, rest
    finally:
        writer.close()


async def test_a_401_closes_the_connection_after_the_body_and_the_client_reads_it(
    tmp_path: Path,
) -> None:
    body = otlp_request(*(resource_metrics({"service.name": f"s{n}"}, "m", 20) for n in range(200)))
    assert len(body) > 64 * 1024
    async with running(tmp_path, _admin_config()) as server:
        assert server.http_address is not None
        host, port = server.http_address
        head, rest = await _raw_post(
            host, port, _basic("admin", "guess"), body, pause_at=len(body) // 4
        )
        # Another client is answered meanwhile and after.
        assert await _push(server, "admin", "admin-pw") == 200
    status_line = head.split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 401 Unauthorized"
    assert b"connection: close" in head.lower()
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    assert len(rest) == length and rest.startswith(b"401 unauthorized")


QUEUE_CONFIG = """
[security]
allow_anonymous = false
failed_authentication_delay_ms = 0
password_check_threads = 1
password_check_queue = 2
[security.plain_users]
alice = "{alice}"
"""


async def test_a_full_password_check_queue_answers_503_and_remembered_clients_still_pass(
    tmp_path: Path,
) -> None:
    # A costly hash (a few hundred ms here) so that the flood's checks pile up.
    alice = hash_password("alice-pw", iterations=400_000).encoded()
    async with running(tmp_path, QUEUE_CONFIG.format(alice=alice)) as server:
        assert await _push(server, "alice", "alice-pw") == 200  # proven, then remembered
        assert server.listener is not None
        kafka = await WireClient.connect(*server.listener.bound_address, client_id="probe")
        flood_done = asyncio.Event()
        legit: list[int] = []

        async def flood() -> list[tuple[int, str | None]]:
            async def one(n: int) -> tuple[int, str | None]:
                async with (
                    aiohttp.ClientSession() as session,
                    session.post(
                        _url(server), data=SMALL, headers=_basic("alice", f"guess-{n}")
                    ) as response,
                ):
                    await response.read()
                    return response.status, response.headers.get("Retry-After")

            try:
                return await asyncio.gather(*(one(n) for n in range(20)))
            finally:
                flood_done.set()

        async def meanwhile() -> None:
            while not flood_done.is_set():
                async with asyncio.timeout(10):  # generous: liveness, not speed
                    await kafka.api_versions()
                legit.append(await _push(server, "alice", "alice-pw"))
                await asyncio.sleep(0.01)

        try:
            async with asyncio.timeout(120):
                answers, _ = await asyncio.gather(flood(), meanwhile())
        finally:
            await kafka.close()
        async with aiohttp.ClientSession() as session, session.get(_url(server, "/metrics")) as r:
            metrics = await r.text()
        assert server.password_checks is not None
        peak = server.password_checks.peak_pending
    assert peak <= 1 + 2  # the running check and the queue's two, never more
    statuses = sorted(status for status, _ in answers)
    assert set(statuses) == {401, 503}
    assert all(retry == "1" for status, retry in answers if status == 503)
    refused = statuses.count(503)
    assert (
        f'kip714_requests_refused_total{{door="otlp",reason="password_check_queue"}} '
        f"{float(refused)}" in metrics
    )
    assert legit and set(legit) == {200}
    hits = re.search(r'^kip714_http_basic_remembered_total\{event="hit"\} (\S+)$', metrics, re.M)
    assert hits is not None and float(hits[1]) >= len(legit)
    assert (
        'kip714_http_basic_hashes_total{iterations="400000",kind="PLAIN-PBKDF2-SHA256"}' in metrics
    )


SCRAM_ONLY = """
[security]
allow_anonymous = false
failed_authentication_delay_ms = 0
"""


async def test_an_unknown_user_costs_the_hash_of_a_known_scram_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = []
    for name in ("carol", "dave"):
        credential = derive_credential(_SHA512, f"{name}-pw", iterations=8192)
        records.append(
            UserScramCredentialRecord(
                name=name,
                mechanism=_SHA512.mechanism_id,
                salt=credential.salt,
                stored_key=credential.stored_key,
                server_key=credential.server_key,
                iterations=credential.iterations,
                secured=True,
            )
        )
    hashed: list[tuple[str, int]] = []
    original: Callable[..., bytes] = hashlib.pbkdf2_hmac

    def observed(name: str, password: bytes, salt: bytes, iterations: int, *rest: object) -> bytes:
        hashed.append((name, iterations))
        return original(name, password, salt, iterations, *rest)

    async with running(tmp_path, SCRAM_ONLY) as server:
        assert server.metastore is not None
        await asyncio.to_thread(server.metastore.append, records)
        monkeypatch.setattr(hashlib, "pbkdf2_hmac", observed)
        known = await _push(server, "carol", "wrong")
        known_work = list(hashed)
        hashed.clear()
        unknown = await _push(server, "mallory", "wrong")
        unknown_work = list(hashed)
    assert (known, unknown) == (401, 401)
    assert known_work == [("sha512", 8192)]
    assert unknown_work == known_work
