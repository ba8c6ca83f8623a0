"""The per-connection SASL state machine: Kafka's order, errors and KIP-368 sessions."""

from __future__ import annotations

import base64

import pytest
from scramp import ScramClient

from telemetry.security import ScramMechanism, derive_credential
from telemetry.security.sasl_session import SaslSession, SaslState
from telemetry.security.settings import SASL_MECHANISMS, hash_password, parse_password

PLAIN_USERS = {"bob": hash_password("bob-pw", iterations=1000)}
SCRAM_USERS = {
    ("carol", ScramMechanism.SCRAM_SHA_256): derive_credential(
        ScramMechanism.SCRAM_SHA_256, "carol-pw"
    )
}


def session(*, max_reauth_ms: int = 0, allow_anonymous: bool = False) -> SaslSession:
    return SaslSession(
        SASL_MECHANISMS,
        plain=lambda user, password: user in PLAIN_USERS and PLAIN_USERS[user].matches(password),
        scram=lambda mechanism, user: SCRAM_USERS.get((user, mechanism)),
        max_reauth_ms=max_reauth_ms,
        allow_anonymous=allow_anonymous,
    )


def plain_login(s: SaslSession, user: str, password: str, now_ms: int = 0) -> int:
    assert s.handshake("PLAIN").error_code == 0
    return s.authenticate(f"\0{user}\0{password}".encode(), 1, now_ms).error_code


def test_only_api_versions_before_authentication() -> None:
    s = session()
    assert s.admits(18, 0) is None
    refusal = s.admits(3, 0)
    assert refusal == "Unexpected Kafka request of type 3 during SASL handshake."
    assert session(allow_anonymous=True).admits(72, 0) is None


def test_plain_success_sets_the_principal_and_the_lifetime() -> None:
    s = session(max_reauth_ms=5000)
    assert s.handshake("PLAIN").error_code == 0
    answer = s.authenticate(b"\0bob\0bob-pw", 1, 1000)
    assert (answer.error_code, answer.authenticated, answer.session_lifetime_ms) == (0, "bob", 5000)
    assert answer.auth_bytes == b""
    assert s.admits(72, 5999) is None
    assert s.admits(72, 6000) == "the SASL session expired without re-authentication (KIP-368)"


def test_v0_gets_no_lifetime_but_the_session_still_expires() -> None:
    s = session(max_reauth_ms=5000)
    s.handshake("PLAIN")
    answer = s.authenticate(b"\0bob\0bob-pw", 0, 0)
    assert answer.session_lifetime_ms == 0
    assert s.admits(72, 5000) is not None


def test_unknown_mechanism_is_33_with_the_list_then_close() -> None:
    answer = session().handshake("GSSAPI")
    assert (answer.error_code, answer.mechanisms, answer.close) == (33, SASL_MECHANISMS, True)


def test_out_of_order_is_34_then_close() -> None:
    s = session()
    answer = s.authenticate(b"\0bob\0bob-pw", 1, 0)
    assert (answer.error_code, answer.close) == (34, True)
    s = session()
    s.handshake("PLAIN")
    assert s.handshake("PLAIN").error_code == 34
    assert s.state is SaslState.FAILED
    assert s.admits(18, 0) is not None  # a failed connection is served nothing more


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0bob\0nope", "Authentication failed: Invalid username or password"),
        (b"\0nobody\0bob-pw", "Authentication failed: Invalid username or password"),
        (b"\0\0bob-pw", "Authentication failed: username not specified"),
    ],
)
def test_a_failed_plain_exchange_is_58_then_close(token: bytes, message: str) -> None:
    s = session()
    s.handshake("PLAIN")
    answer = s.authenticate(token, 1, 0)
    assert (answer.error_code, answer.error_message, answer.close) == (58, message, True)
    assert s.principal_name is None


def scram_login(s: SaslSession, user: str, password: str, now_ms: int) -> int:
    client = ScramClient(["SCRAM-SHA-256"], user, password)
    assert s.handshake("SCRAM-SHA-256").error_code == 0
    first = s.authenticate(client.get_client_first().encode(), 1, now_ms)
    if first.error_code:
        return first.error_code
    client.set_server_first(first.auth_bytes.decode())
    final = s.authenticate(client.get_client_final().encode(), 1, now_ms)
    if final.error_code == 0:
        client.set_server_final(final.auth_bytes.decode())  # verifies the server signature
    return final.error_code


def test_scram_and_reauthentication_with_the_same_principal() -> None:
    s = session(max_reauth_ms=1000)
    assert scram_login(s, "carol", "carol-pw", 0) == 0
    assert s.expires_at_ms == 1000
    # KIP-368: a handshake on an authenticated connection starts again; the session renews.
    assert scram_login(s, "carol", "carol-pw", 900) == 0
    assert (s.principal_name, s.expires_at_ms) == ("carol", 1900)
    assert s.admits(72, 1500) is None


def test_reauthentication_cannot_change_mechanism_or_principal() -> None:
    s = session()
    assert plain_login(s, "bob", "bob-pw") == 0
    assert s.handshake("SCRAM-SHA-256").error_code == 33
    s = session()
    PLAIN_USERS["eve"] = parse_password("eve-pw")
    try:
        assert plain_login(s, "bob", "bob-pw") == 0
        s.handshake("PLAIN")
        answer = s.authenticate(b"\0eve\0eve-pw", 1, 0)
    finally:
        del PLAIN_USERS["eve"]
    assert answer.error_code == 58
    assert answer.error_message == (
        "Cannot change principals during re-authentication from User:bob: User:eve"
    )


def test_scram_wrong_password_hides_the_reason() -> None:
    s = session()
    assert scram_login(s, "carol", "wrong", 0) == 58


def test_password_hashes_round_trip_and_refuse_garbage() -> None:
    stored = hash_password("s3cret", iterations=1000)
    parsed = parse_password(stored.encoded())
    assert parsed.matches("s3cret")
    assert not parsed.matches("s3cret ")
    salt = base64.b64encode(b"x").decode()
    with pytest.raises(ValueError, match="32-byte hash"):
        parse_password(f"pbkdf2_sha256$1000${salt}${salt}")
    with pytest.raises(ValueError, match="expected"):
        parse_password("pbkdf2_sha256$1000$abc")
    # Plain text is hashed at load: only the hash is kept.
    assert parse_password("plain").matches("plain")


def test_raw_tokens_after_handshake_v0_and_no_reauthentication_that_way() -> None:
    s = session()
    assert s.handshake("PLAIN", raw_tokens=True).error_code == 0
    raw_before = s.raw_tokens
    assert s.authenticate(b"\0bob\0bob-pw", 0, 0).authenticated == "bob"
    # Back to Kafka requests once authenticated.
    assert (raw_before, s.raw_tokens) == (True, False)
    answer = s.handshake("PLAIN", raw_tokens=True)
    assert (answer.error_code, answer.close) == (34, True)
