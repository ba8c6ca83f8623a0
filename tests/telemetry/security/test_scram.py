"""SCRAM server side: RFC 7677's worked exchange byte for byte, full exchanges with
scramp as an independent client, and every refusal answered the way Kafka answers."""

from __future__ import annotations

import base64

import pytest
import scramp

from telemetry.security import (
    MIN_ITERATIONS,
    SaslAuthenticationError,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_salted_password,
    derive_credential,
    generic_failure_message,
    salted_password,
    verify_password,
)

# RFC 7677 §3, recomputed in the admin-plane reference.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FINAL = (
    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


def _rfc_credential() -> ScramCredential:
    return derive_credential(SHA256, "pencil", iterations=4096, salt=RFC_SALT)


def _server(
    credentials: dict[str, ScramCredential], mechanism: ScramMechanism = SHA256
) -> ScramServer:
    return ScramServer(mechanism, credentials.get, server_nonce=RFC_SERVER_NONCE)


def test_rfc_7677_credential_keys() -> None:
    credential = _rfc_credential()
    assert (
        base64.b64encode(credential.stored_key) == b"WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
    )
    assert (
        base64.b64encode(credential.server_key) == b"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
    )
    assert "stored_key" not in repr(credential)


def test_rfc_7677_exchange() -> None:
    server = _server({"user": _rfc_credential()})
    server_first = server.evaluate_response(f"n,,n=user,r={RFC_CLIENT_NONCE}".encode())
    assert server_first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    complete_after_first = server.complete
    server_final = server.evaluate_response(RFC_CLIENT_FINAL.encode())
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert (complete_after_first, server.complete) == (False, True)
    assert server.username == "user"


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
@pytest.mark.parametrize("username", ["alice", "odd,name=x", "ünï"])
def test_scramp_client_completes_the_exchange(mechanism: ScramMechanism, username: str) -> None:
    credential = derive_credential(mechanism, "s3cret-pässword", iterations=4096)
    server = ScramServer(mechanism, {username: credential}.get)
    client = scramp.ScramClient([mechanism.mechanism_name], username, "s3cret-pässword")
    server_first = server.evaluate_response(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.evaluate_response(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # raises unless v= is the right signature
    assert server.complete
    assert server.username == username


def test_credential_from_salted_password_matches_derivation() -> None:
    # AlterUserScramCredentials carries (salt, SaltedPassword); the keys must be the same.
    salt = b"0123456789abcdef"
    salted = salted_password(SHA512, "pw", salt, 8192)
    assert credential_from_salted_password(SHA512, salt, salted, 8192) == derive_credential(
        SHA512, "pw", iterations=8192, salt=salt
    )


def test_derive_refuses_iterations_outside_kafkas_range() -> None:
    for iterations in (MIN_ITERATIONS - 1, 16385):
        with pytest.raises(ValueError, match="iterations"):
            derive_credential(SHA256, "pw", iterations=iterations)


def test_verify_password_for_plain() -> None:
    credential = _rfc_credential()
    assert verify_password(SHA256, credential, "pencil")
    assert not verify_password(SHA256, credential, "pencil ")


def _refused(server: ScramServer, token: bytes) -> SaslAuthenticationError:
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate_response(token)
    assert caught.value.error_code == 58
    return caught.value


GENERIC_256 = generic_failure_message("SCRAM-SHA-256")


@pytest.mark.parametrize(
    "client_first",
    [
        b"y,,n=user,r=abc",  # the client thinks the server cannot bind: Kafka accepts only n
        b"p=tls-unique,,n=user,r=abc",
        b"n,,r=abc,n=user",
        b"n,,n=user",
        b"n,,n=us=2Xer,r=abc",  # an escape other than =2C / =3D
        b"n,,n=,r=abc",
        b"n,,n=user,r=",
        b"n,,n=user,r=abc,tokenauth=true",  # kip714 issues no delegation tokens
        b"n,,n=nobody,r=abc",
        b"\xff\xfe",
    ],
)
def test_bad_or_unknown_client_first_gets_the_generic_message(client_first: bytes) -> None:
    error = _refused(_server({"user": _rfc_credential()}), client_first)
    assert error.client_message == GENERIC_256
    assert str(error) != GENERIC_256  # the log still gets the reason


def test_authzid_different_from_user_is_refused_with_kafkas_text() -> None:
    error = _refused(_server({"user": _rfc_credential()}), b"n,a=admin,n=user,r=abc")
    assert error.client_message == (
        "Authentication failed: Client requested an authorization id that is different "
        "from username"
    )


def test_authzid_equal_to_user_is_accepted_and_bound_into_the_proof() -> None:
    """A hand-written client for ``n,a=user,``: scramp only sends ``n,,``."""
    mechanism = SHA256
    salted = salted_password(mechanism, "pencil", RFC_SALT, 4096)
    client_key = mechanism.hmac(salted, b"Client Key")
    stored_key = mechanism.hash(client_key)
    bare = f"n=user,r={RFC_CLIENT_NONCE}"
    server = _server({"user": _rfc_credential()})
    server_first = server.evaluate_response(f"n,a=user,{bare}".encode()).decode()
    nonce = RFC_CLIENT_NONCE + RFC_SERVER_NONCE
    for gs2_header, accepted in (("n,,", False), ("n,a=user,", True)):
        binding = base64.b64encode(gs2_header.encode()).decode()
        without_proof = f"c={binding},r={nonce}"
        auth_message = f"{bare},{server_first},{without_proof}".encode()
        signature = mechanism.hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        if accepted:
            server = _server({"user": _rfc_credential()})
            server.evaluate_response(f"n,a=user,{bare}".encode())
            assert server.evaluate_response(final).startswith(b"v=")
            assert server.username == "user"
        else:
            _refused(server, final)  # the binding must be the header the client sent


def test_unknown_extensions_are_ignored() -> None:
    server = _server({"user": _rfc_credential()})
    server.evaluate_response(f"n,,n=user,r={RFC_CLIENT_NONCE},foo=bar".encode())
    # The bare message (with the extension) is part of the AuthMessage, so the
    # RFC proof no longer verifies: the extension was kept, not dropped.
    _refused(server, RFC_CLIENT_FINAL.encode())


@pytest.mark.parametrize(
    "client_final",
    [
        RFC_CLIENT_FINAL.replace("p=dHzb", "p=dHzc"),  # wrong proof
        RFC_CLIENT_FINAL.replace("r=rOpr", "r=xOpr"),  # wrong nonce
        RFC_CLIENT_FINAL.replace("c=biws", "c=eSws"),  # "y,," channel binding
        RFC_CLIENT_FINAL.replace("p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "p=AAAA"),
        RFC_CLIENT_FINAL.replace("p=", "p=!!"),  # not base64
        "c=biws,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        "garbage",
    ],
)
def test_bad_client_final_is_refused(client_final: str) -> None:
    server = _server({"user": _rfc_credential()})
    server.evaluate_response(f"n,,n=user,r={RFC_CLIENT_NONCE}".encode())
    error = _refused(server, client_final.encode())
    assert error.client_message == GENERIC_256
    assert not server.complete
    assert server.username is None


def test_a_failed_or_finished_exchange_takes_no_more_tokens() -> None:
    server = _server({"user": _rfc_credential()})
    _refused(server, b"garbage")
    _refused(server, f"n,,n=user,r={RFC_CLIENT_NONCE}".encode())  # no second chance
    done = _server({"user": _rfc_credential()})
    done.evaluate_response(f"n,,n=user,r={RFC_CLIENT_NONCE}".encode())
    done.evaluate_response(RFC_CLIENT_FINAL.encode())
    _refused(done, RFC_CLIENT_FINAL.encode())


def test_a_credential_below_the_minimum_iterations_is_refused() -> None:
    salted = salted_password(SHA256, "pencil", RFC_SALT, 1024)
    weak = credential_from_salted_password(SHA256, RFC_SALT, salted, 1024)
    _refused(_server({"user": weak}), f"n,,n=user,r={RFC_CLIENT_NONCE}".encode())


def test_mechanism_lookup_by_kafka_name_and_id() -> None:
    assert ScramMechanism.by_name("SCRAM-SHA-512") is SHA512
    assert ScramMechanism.by_id(1) is SHA256
    assert ScramMechanism.by_name("SCRAM-SHA-1") is None
    assert ScramMechanism.by_id(0) is None
