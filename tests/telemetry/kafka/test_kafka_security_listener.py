"""The listener's security over the wire: session expiry, SCRAM admin rules, who may alter."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from typing import TYPE_CHECKING

import pytest
from scramp import ScramClient

from telemetry.admin.authorizer import is_loopback
from telemetry.errors import ConfigError
from telemetry.kafka.settings import KafkaListenerConfig
from telemetry.metastore import (
    MetadataStoreClosedError,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from telemetry.security import ScramMechanism, derive_credential, salted_password
from telemetry.security.settings import SecuritySettings
from telemetry.server.config import Settings, load_settings
from telemetry.server.startup import describe_security, warn_about_exposure
from telemetry.wire import ApiKey, MetadataRequest, MetadataResponse
from telemetry.wire.admin_apis import AdminApiKey, decode_admin_response, encode_admin_request
from telemetry.wire.headers import RequestHeader
from telemetry.wire.sasl_messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from telemetry.wire.scram_messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from tests.telemetry.kafka.test_kafka_security_clients import sasl_frame
from tests.telemetry.kafka_wire_client import WireClient, sized
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

SECURED = """
[security]
super_users = ["User:admin"]
connections_max_reauth_ms = {reauth_ms}
[security.plain_users]
admin = "admin-pw"
bob = "bob-pw"
"""


async def login(server: Server, user: str, password: str) -> tuple[WireClient, int]:
    """A wire client authenticated with PLAIN (SaslAuthenticate v1); its session lifetime."""
    assert server.listener is not None
    client = await WireClient.connect(*server.listener.bound_address, "t")
    await client.api_versions()
    await sasl_frame(client, AdminApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    token = f"\0{user}\0{password}".encode()
    _, answer = await sasl_frame(
        client, AdminApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=token)
    )
    assert isinstance(answer, SaslAuthenticateResponse)
    assert answer.error_code == 0, answer
    return client, answer.session_lifetime_ms


def upsertion(name: str, iterations: int = 4096, mechanism: int = 1) -> ScramCredentialUpsertion:
    scram = ScramMechanism.by_id(mechanism) or ScramMechanism.SCRAM_SHA_256
    salt = b"salt-" + name.encode()
    return ScramCredentialUpsertion(
        name=name,
        mechanism=mechanism,
        iterations=iterations,
        salt=salt,
        salted_password=salted_password(scram, "pw", salt, max(iterations, 1)),
    )


async def alter(
    client: WireClient, request: AlterUserScramCredentialsRequest
) -> dict[str, tuple[int, str | None]]:
    _, answer = await sasl_frame(client, AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, request)
    assert isinstance(answer, AlterUserScramCredentialsResponse)
    return {r.user: (r.error_code, r.error_message) for r in answer.results}


async def test_an_expired_session_is_closed_at_its_next_request(tmp_path: Path) -> None:
    async with running(tmp_path, SECURED.format(reauth_ms=300)) as server:
        client, lifetime = await login(server, "bob", "bob-pw")
        try:
            assert lifetime == 300
            assert isinstance(await client.metadata(), MetadataResponse)  # within the session
            await asyncio.sleep(0.4)
            data = client.frame(ApiKey.METADATA, 12, MetadataRequest(topics=()))[1]
            await client.write(data)
            assert await client.closed_by_server()
        finally:
            await client.close()
        assert server.listener is not None
        assert server.listener.stats.closed_for["refused"] == 1


async def test_scram_credentials_follow_kafkas_rules(tmp_path: Path) -> None:
    async with running(tmp_path, SECURED.format(reauth_ms=0)) as server:
        client, _ = await login(server, "admin", "admin-pw")
        try:
            results = await alter(
                client,
                AlterUserScramCredentialsRequest(
                    deletions=(ScramCredentialDeletion(name="ghost", mechanism=1),),
                    upsertions=(
                        upsertion("carol"),
                        upsertion("few", iterations=4095),
                        upsertion("many", iterations=16385),
                        upsertion("odd", mechanism=3),
                        upsertion("twice"),
                        upsertion("twice", mechanism=2),
                        upsertion(""),
                    ),
                ),
            )
            assert results == {
                "ghost": (91, "Attempt to delete a user credential that does not exist"),
                "carol": (0, None),
                "few": (93, "Too few iterations"),
                "many": (93, "Too many iterations"),
                "odd": (33, "Unknown SCRAM mechanism"),
                "twice": (92, "A user credential cannot be altered twice in the same request"),
                "": (93, "Username must not be empty"),
            }
            assert server.metastore is not None
            assert set(server.metastore.image.scram_credentials) == {("carol", 1)}
            _, described = await sasl_frame(
                client,
                AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                0,
                DescribeUserScramCredentialsRequest(users=("carol", "nobody")),
            )
            assert isinstance(described, DescribeUserScramCredentialsResponse)
            by_user = {r.user: r for r in described.results}
            assert [(i.mechanism, i.iterations) for i in by_user["carol"].credential_infos] == [
                (1, 4096)
            ]
            assert by_user["nobody"].error_code == 91
            deleted = await alter(
                client,
                AlterUserScramCredentialsRequest(
                    deletions=(ScramCredentialDeletion(name="carol", mechanism=1),)
                ),
            )
            assert deleted == {"carol": (0, None)}
            assert not server.metastore.image.scram_credentials
        finally:
            await client.close()


async def test_only_super_users_alter_credentials_when_security_is_on(tmp_path: Path) -> None:
    async with running(tmp_path, SECURED.format(reauth_ms=0)) as server:
        client, _ = await login(server, "bob", "bob-pw")
        try:
            results = await alter(
                client, AlterUserScramCredentialsRequest(upsertions=(upsertion("mallory"),))
            )
            assert results == {"mallory": (31, None)}
            _, described = await sasl_frame(
                client,
                AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                0,
                DescribeUserScramCredentialsRequest(users=None),
            )
            assert isinstance(described, DescribeUserScramCredentialsResponse)
            assert described.error_code == 31
        finally:
            await client.close()
        assert server.metastore is not None
        assert not server.metastore.image.scram_credentials


async def test_a_failed_append_is_answered_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store refusing the change: an error result for the user, and one error log line."""
    async with running(tmp_path, SECURED.format(reauth_ms=0)) as server:
        client, _ = await login(server, "admin", "admin-pw")
        try:
            assert server.metastore is not None
            await asyncio.to_thread(server.metastore.close)
            with caplog.at_level(logging.ERROR, logger="telemetry.kafka.authenticator"):
                results = await alter(
                    client, AlterUserScramCredentialsRequest(upsertions=(upsertion("carol"),))
                )
            assert results["carol"][0] == -1
            assert "could not take SCRAM credentials" in caplog.text
        finally:
            await client.close()


async def test_without_security_anyone_may_alter_and_the_startup_line_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="telemetry.server.bootstrap"):
        async with running(tmp_path, "") as server:
            assert server.listener is not None
            client = await WireClient.connect(*server.listener.bound_address, "t")
            try:
                results = await alter(
                    client, AlterUserScramCredentialsRequest(upsertions=(upsertion("carol"),))
                )
                assert results == {"carol": (0, None)}
            finally:
                await client.close()
    assert "security=none(every principal may read and alter)" in caplog.text
    assert "without [security]" not in caplog.text  # loopback only: no warning


def test_security_settings_and_their_defaults(tmp_path: Path) -> None:
    path = tmp_path / "kip714.toml"
    path.write_text('[security]\n[security.plain_users]\nbob = "pw"\n')
    settings = load_settings(path).security
    assert settings.sasl_mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert settings.allow_anonymous is False
    assert settings.plain_users["bob"].matches("pw")
    assert "pw" not in repr(settings)
    assert describe_security(settings) == "sasl=PLAIN+SCRAM-SHA-256+SCRAM-SHA-512,anonymous=refused"
    path.write_text('[security]\nsuper_users = ["User:admin"]\nsasl_mechanisms = ["PLAIN"]\n')
    assert load_settings(path).super_users == ("User:admin",)
    for bad, key in [
        ('[security]\nsasl_mechanisms = ["GSSAPI"]\n', "security.sasl_mechanisms"),
        ("[security]\nsasl_mechanisms = []\nallow_anonymous = false\n", "allow_anonymous"),
        ('[security]\nsuper_users = ["admin"]\n', "security.super_users"),
        ('[kafka.tls]\ncertfile = "/nonexistent.pem"\n', "kafka.tls.certfile"),
        ("[security]\nconnections_max_reauth_ms = -1\n", "connections_max_reauth_ms"),
    ]:
        path.write_text(bad)
        with pytest.raises(ConfigError, match=key):
            load_settings(path)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
    ],
)
def test_which_binds_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_exposure_warnings(caplog: pytest.LogCaptureFixture) -> None:
    open_everywhere = Settings(kafka=KafkaListenerConfig(host="0.0.0.0"), http_host="10.0.0.1")
    with caplog.at_level(logging.WARNING, logger="telemetry.server.bootstrap"):
        warn_about_exposure(open_everywhere)
        warn_about_exposure(Settings())
    assert [r.getMessage() for r in caplog.records] == [
        "listening beyond loopback (kafka=0.0.0.0, http=10.0.0.1) without [security]: any peer "
        "that can connect may push telemetry and alter SCRAM credentials (docs/security.md)"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="telemetry.server.bootstrap"):
        warn_about_exposure(
            Settings(
                security=SecuritySettings(
                    configured=True, sasl_mechanisms=("PLAIN",), allow_anonymous=False
                )
            )
        )
    # The HTTP ingestion routes require a principal too (telemetry.http.authentication).
    assert "still takes pushes" not in caplog.text


async def test_plain_password_checks_run_off_the_event_loop(tmp_path: Path) -> None:
    """A PBKDF2 per PLAIN attempt (100 ms at the default iterations) must not stall every
    other client: the check runs in a thread, and pushes are served meanwhile."""
    loop_thread = threading.get_ident()
    checked_on: list[int] = []
    release = threading.Event()

    class SlowHash:
        def matches(self, password: str) -> bool:
            checked_on.append(threading.get_ident())
            assert release.wait(30)
            return password == "bob-pw"

    # Two check threads: the slow check holds one, the other login takes the second.
    config = SECURED.format(reauth_ms=0).replace(
        "[security]\n", "[security]\npassword_check_threads = 2\n"
    )
    async with running(tmp_path, config) as server:
        assert server.listener is not None and server.listener.security is not None
        security = server.listener.security
        security.settings = dataclasses.replace(
            security.settings,
            plain_users={**security.settings.plain_users, "slow": SlowHash()},  # type: ignore[dict-item]
        )
        slow = await WireClient.connect(*server.listener.bound_address, "t")
        try:
            await sasl_frame(
                slow, AdminApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")
            )
            header = RequestHeader(
                api_key=AdminApiKey.SASL_AUTHENTICATE, api_version=1, correlation_id=99,
                client_id="t",
            )  # fmt: skip
            await slow.write(
                encode_admin_request(header, SaslAuthenticateRequest(auth_bytes=b"\0slow\0bob-pw"))
            )
            # While the check waits in its thread, another client logs in and is served.
            other, _ = await login(server, "bob", "bob-pw")
            assert isinstance(await other.metadata(), MetadataResponse)
            await other.close()
            release.set()
            _, answer = decode_admin_response(
                await slow.read_frame(), AdminApiKey.SASL_AUTHENTICATE, 1
            )
            assert isinstance(answer, SaslAuthenticateResponse)
            assert answer.error_code == 0
        finally:
            release.set()
            await slow.close()
        assert checked_on and loop_thread not in checked_on


async def test_saslhandshake_v0_exchanges_raw_tokens(tmp_path: Path) -> None:
    """Kafka's legacy framing (before KIP-152): size-prefixed SASL tokens, no header."""
    async with running(tmp_path, SECURED.format(reauth_ms=0)) as server:
        assert server.listener is not None and server.metastore is not None
        credential = derive_credential(ScramMechanism.SCRAM_SHA_256, "carol-pw")
        await asyncio.to_thread(
            server.metastore.append,
            [
                UserScramCredentialRecord(
                    name="carol", mechanism=1, salt=credential.salt,
                    stored_key=credential.stored_key, server_key=credential.server_key,
                    iterations=credential.iterations,
                )
            ],
        )  # fmt: skip
        client = await WireClient.connect(*server.listener.bound_address, "t")
        try:
            versions = await client.api_versions()
            handshake_range = next(e for e in versions.api_keys if e.api_key == 17)
            assert (handshake_range.min_version, handshake_range.max_version) == (0, 1)
            await sasl_frame(
                client,
                AdminApiKey.SASL_HANDSHAKE,
                0,
                SaslHandshakeRequest(mechanism="SCRAM-SHA-256"),
            )
            scram = ScramClient(["SCRAM-SHA-256"], "carol", "carol-pw")
            await client.write(sized(scram.get_client_first().encode()))
            scram.set_server_first((await client.read_frame()).decode())
            await client.write(sized(scram.get_client_final().encode()))
            scram.set_server_final((await client.read_frame()).decode())
            # Authenticated: requests are served, under the SCRAM user.
            assert isinstance(await client.metadata(), MetadataResponse)
        finally:
            await client.close()
        # A wrong PLAIN password in raw framing: no answer, the connection closes.
        client = await WireClient.connect(*server.listener.bound_address, "t")
        try:
            await sasl_frame(
                client, AdminApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN")
            )
            await client.write(sized(b"\0bob\0wrong"))
            assert await client.closed_by_server()
        finally:
            await client.close()
        assert server.listener.security is not None
        assert (server.listener.security.authentications, server.listener.security.failures) == (
            1,
            1,
        )


async def test_a_password_check_that_raises_is_58_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class BrokenHash:
        def matches(self, password: str) -> bool:
            raise MemoryError("no memory for PBKDF2")

    # Two check threads: the slow check holds one, the other login takes the second.
    config = SECURED.format(reauth_ms=0).replace(
        "[security]\n", "[security]\npassword_check_threads = 2\n"
    )
    async with running(tmp_path, config) as server:
        assert server.listener is not None and server.listener.security is not None
        security = server.listener.security
        security.settings = dataclasses.replace(
            security.settings,
            plain_users={"broken": BrokenHash()},  # type: ignore[dict-item]
        )
        client = await WireClient.connect(*server.listener.bound_address, "t")
        try:
            await sasl_frame(
                client, AdminApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")
            )
            with caplog.at_level(logging.ERROR, logger="telemetry.kafka.authenticator"):
                _, answer = await sasl_frame(
                    client,
                    AdminApiKey.SASL_AUTHENTICATE,
                    1,
                    SaslAuthenticateRequest(auth_bytes=b"\0broken\0pw"),
                )
            assert isinstance(answer, SaslAuthenticateResponse)
            assert answer.error_code == 58
            assert "no memory for PBKDF2" in caplog.text
            assert await client.closed_by_server()
        finally:
            await client.close()


async def test_stop_closes_the_metadata_store(tmp_path: Path) -> None:
    async with running(tmp_path, "") as server:
        store = server.metastore
        assert store is not None
    assert server.metastore is None
    with pytest.raises(MetadataStoreClosedError):
        store.append([RemoveUserScramCredentialRecord(name="x", mechanism=1)])
