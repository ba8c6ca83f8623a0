"""Real librdkafka clients over SASL_PLAINTEXT, SSL and SASL_SSL: their telemetry lands
in the table under the principal they authenticated as."""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import TYPE_CHECKING, Any

import aiohttp
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from telemetry.security.settings import hash_password
from telemetry.wire import ApiKey
from telemetry.wire.admin_apis import (
    AdminApiKey,
    AdminRequest,
    AdminResponse,
    decode_admin_response,
    encode_admin_request,
)
from telemetry.wire.headers import RequestHeader
from telemetry.wire.sasl_messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from tests.exporters.lake_support import table_rows
from tests.telemetry.kafka_wire_client import WireClient
from tests.telemetry.security.tls_support import make_certificates
from tests.telemetry.server_support import get, running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 200
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
path = "{landing}"
max_file_age_s = 0.2
[security]
super_users = ["User:admin"]
connections_max_reauth_ms = {reauth_ms}
[security.plain_users]
admin = "admin-secret"
bob = "{bob_hash}"
"""
TLS = """
[kafka.tls]
certfile = "{cert}"
keyfile = "{key}"
cafile = "{ca}"
[http.tls]
certfile = "{cert}"
keyfile = "{key}"
"""
WAIT_S = 60.0


def config(tmp_path: Path, *, reauth_ms: int = 0, tls: bool = False) -> str:
    text = CONFIG.format(
        landing=tmp_path / "landing",
        reauth_ms=reauth_ms,
        bob_hash=hash_password("bob-secret").encoded(),
    )
    if tls:
        certificates = make_certificates(tmp_path / "certs")
        text += TLS.format(
            cert=certificates.server_cert, key=certificates.server_key, ca=certificates.ca
        )
    return text


def principals(landing: Path) -> dict[str, int]:
    """Rows per principal in the landing (committed rows only)."""
    counts: dict[str, int] = {}
    for principal in (r["principal"] for r in table_rows(landing, ["principal"])):
        counts[principal] = counts.get(principal, 0) + 1
    return counts


def client_config(server: Server, client_id: str, **extra: str | int | bool) -> dict[str, Any]:
    assert server.listener is not None
    host, port = server.listener.bound_address
    return {
        "bootstrap.servers": f"{host}:{port}",
        "client.id": client_id,
        "enable.metrics.push": True,
        "enable.sparse.connections": False,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        **extra,
    }


def sasl(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


async def until(condition: Any, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def close(producers: list[Producer]) -> None:
    for producer in producers:
        await asyncio.to_thread(producer.flush, 1.0)
    producers.clear()  # the last references: librdkafka's handles are destroyed here


async def create_scram_users(server: Server, users: dict[str, tuple[ScramMechanism, str]]) -> None:
    """The way an operator does it: confluent-kafka's AdminClient, authenticated as a super user."""
    admin = AdminClient(client_config(server, "admin", **sasl("PLAIN", "admin", "admin-secret")))
    upsertions: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 8192), password.encode())
        for user, (mechanism, password) in users.items()
    ]
    futures = admin.alter_user_scram_credentials(upsertions, request_timeout=30)
    for future in futures.values():
        assert await asyncio.to_thread(future.result, 30) is None
    described = admin.describe_user_scram_credentials(list(users), request_timeout=30)
    assert isinstance(described, dict)
    for user, future in described.items():
        description = await asyncio.to_thread(future.result, 30)
        assert [info.mechanism for info in description.scram_credential_infos] == [users[user][0]]
        assert [info.iterations for info in description.scram_credential_infos] == [8192]
    del admin


async def test_plain_and_scram_pushes_land_under_their_principal(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    async with running(tmp_path, config(tmp_path)) as server:
        await create_scram_users(
            server,
            {
                "carol": (ScramMechanism.SCRAM_SHA_256, "carol-secret"),
                "dave": (ScramMechanism.SCRAM_SHA_512, "dave-secret"),
            },
        )
        producers = [
            Producer(client_config(server, "bob-app", **sasl("PLAIN", "bob", "bob-secret"))),
            Producer(
                client_config(server, "carol-app", **sasl("SCRAM-SHA-256", "carol", "carol-secret"))
            ),
            Producer(
                client_config(server, "dave-app", **sasl("SCRAM-SHA-512", "dave", "dave-secret"))
            ),
        ]
        try:
            wanted = {"User:bob", "User:carol", "User:dave"}
            await until(lambda: wanted <= set(principals(landing)))
        finally:
            await close(producers)
        assert server.listener is not None and server.listener.security is not None
        assert server.listener.security.failures == 0
    # Nothing unauthenticated got in (the admin client pushes its own telemetry).
    assert set(principals(landing)) == {"User:admin", "User:bob", "User:carol", "User:dave"}
    # Restarted on the same data directory, the SCRAM users are still there.
    async with running(tmp_path, config(tmp_path)) as server:
        assert server.metastore is not None
        assert {user for user, _ in server.metastore.image.scram_credentials} == {"carol", "dave"}


async def test_librdkafka_reauthenticates_within_one_connection(tmp_path: Path) -> None:
    """KIP-368: the session lifetime makes librdkafka re-authenticate at 90% of it; pushes go on."""
    landing = tmp_path / "landing"
    async with running(tmp_path, config(tmp_path, reauth_ms=1500)) as server:
        assert server.listener is not None and server.listener.security is not None
        security = server.listener.security
        await create_scram_users(server, {"carol": (ScramMechanism.SCRAM_SHA_256, "carol-pw")})
        producer = Producer(
            client_config(server, "carol-app", **sasl("SCRAM-SHA-256", "carol", "carol-pw"))
        )
        producers = [producer]
        try:
            await until(lambda: security.reauthentications >= 2)
            landed_before = principals(landing).get("User:carol", 0)
            await until(lambda: principals(landing).get("User:carol", 0) > landed_before)
        finally:
            await close(producers)
        assert security.failures == 0
        # No connection was closed for an expired session: each re-authenticated in time.
        assert server.listener.stats.closed_for["refused"] == 0


async def sasl_frame(
    client: WireClient, api_key: int, version: int, request: AdminRequest
) -> tuple[int, AdminResponse]:
    client._correlation_id += 1
    header = RequestHeader(
        api_key=api_key, api_version=version, correlation_id=client._correlation_id, client_id="t"
    )
    await client.write(encode_admin_request(header, request))
    return decode_admin_response(await client.read_frame(), api_key, version)


async def test_a_wrong_password_is_error_58_then_close(tmp_path: Path) -> None:
    async with running(tmp_path, config(tmp_path)) as server:
        assert server.listener is not None
        host, port = server.listener.bound_address
        client = await WireClient.connect(host, port, "t")
        try:
            versions = await client.api_versions()
            advertised = {entry.api_key: entry for entry in versions.api_keys}
            assert advertised[AdminApiKey.SASL_HANDSHAKE].max_version == 1
            assert advertised[AdminApiKey.SASL_AUTHENTICATE].max_version == 2
            assert AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS in advertised
            _, handshake = await sasl_frame(
                client, AdminApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")
            )
            assert isinstance(handshake, SaslHandshakeResponse)
            assert handshake.error_code == 0
            _, answer = await sasl_frame(
                client,
                AdminApiKey.SASL_AUTHENTICATE,
                1,
                SaslAuthenticateRequest(auth_bytes=b"\0bob\0wrong"),
            )
            assert isinstance(answer, SaslAuthenticateResponse)
            assert answer.error_code == 58
            assert answer.error_message == "Authentication failed: Invalid username or password"
            assert await client.closed_by_server()
        finally:
            await client.close()
        status, metrics = await get(server, "/metrics")
        assert status == 200
        assert 'kip714_kafka_sasl_authentications_total{result="failed"} 1.0' in metrics
        assert 'kip714_kafka_requests_total{api="SaslAuthenticate"} 1.0' in metrics


async def test_an_unauthenticated_request_closes_the_connection(tmp_path: Path) -> None:
    async with running(tmp_path, config(tmp_path)) as server:
        assert server.listener is not None
        host, port = server.listener.bound_address
        client = await WireClient.connect(host, port, "t")
        try:
            await client.api_versions()
            data = client.frame(ApiKey.METADATA, 12, _metadata_request())[1]
            await client.write(data)
            assert await client.closed_by_server()
        finally:
            await client.close()
        # A wrong mechanism is 33 with the enabled list, then close.
        client = await WireClient.connect(host, port, "t")
        try:
            _, handshake = await sasl_frame(
                client, AdminApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="GSSAPI")
            )
            assert isinstance(handshake, SaslHandshakeResponse)
            assert handshake.error_code == 33
            assert handshake.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
            assert await client.closed_by_server()
        finally:
            await client.close()
        assert server.listener.stats.closed_for["refused"] == 2


def _metadata_request() -> Any:
    from telemetry.wire import MetadataRequest  # noqa: PLC0415

    return MetadataRequest(topics=())


async def test_ssl_client_certificates_and_sasl_ssl(tmp_path: Path) -> None:
    """SSL: the client certificate's subject is the principal; SASL_SSL: the SASL user is."""
    landing = tmp_path / "landing"
    async with running(tmp_path, config(tmp_path, tls=True)) as server:
        certs = tmp_path / "certs"
        tls = {
            "ssl.ca.location": str(certs / "ca.pem"),
            "ssl.certificate.location": str(certs / "client.pem"),
            "ssl.key.location": str(certs / "client.key"),
        }
        producers = [
            Producer(client_config(server, "cert-app", **{"security.protocol": "SSL", **tls})),
            Producer(
                client_config(
                    server,
                    "bob-tls-app",
                    **{**sasl("PLAIN", "bob", "bob-secret"), "security.protocol": "SASL_SSL"},
                    **tls,
                )
            ),
        ]
        try:
            wanted = {"User:CN=alice,O=kip714", "User:bob"}
            await until(lambda: wanted <= set(principals(landing)))
        finally:
            await close(producers)
        # The HTTP listener speaks TLS too.
        assert server.http_address is not None
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        host, port = server.http_address
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"https://{host}:{port}/healthz", ssl=context) as response,
        ):
            assert response.status == 200
    assert set(principals(landing)) == {"User:CN=alice,O=kip714", "User:bob"}
