"""SASL/PLAIN: Kafka's token split, its checks in its order, and its messages."""

from __future__ import annotations

import pytest

from telemetry.security import (
    SaslAuthenticationError,
    ScramMechanism,
    authenticate_plain,
    derive_credential,
    generic_failure_message,
    parse_plain_response,
    verify_password,
)

_CREDENTIALS = {"alice": derive_credential(ScramMechanism.SCRAM_SHA_512, "wonder")}


def _verify(username: str, password: str) -> bool:
    credential = _CREDENTIALS.get(username)
    return credential is not None and verify_password(
        ScramMechanism.SCRAM_SHA_512, credential, password
    )


@pytest.mark.parametrize("authzid", ["", "alice"])  # librdkafka sends "", kafka-python the user
def test_valid_token_authenticates(authzid: str) -> None:
    assert authenticate_plain(f"{authzid}\0alice\0wonder".encode(), _verify) == "alice"


def test_password_is_kept_out_of_repr() -> None:
    assert "wonder" not in repr(parse_plain_response(b"\0alice\0wonder"))


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0\0wonder", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0bob\0wonder", "Authentication failed: Invalid username or password"),
        (
            b"admin\0alice\0wonder",
            "Authentication failed: Client requested an authorization id that is different "
            "from username",
        ),
        (b"alice\0wonder", generic_failure_message("PLAIN")),
        (b"\0alice\0won\0der", generic_failure_message("PLAIN")),  # 4 tokens, not a password
        (b"\0alice\0\xff", generic_failure_message("PLAIN")),
    ],
)
def test_refusals_carry_kafkas_message(token: bytes, message: str) -> None:
    with pytest.raises(SaslAuthenticationError) as caught:
        authenticate_plain(token, _verify)
    assert caught.value.error_code == 58
    assert caught.value.client_message == message


def test_a_wrong_authzid_is_checked_only_after_the_password() -> None:
    # Kafka verifies the credentials first: a stranger learns nothing about authzid rules.
    with pytest.raises(SaslAuthenticationError) as caught:
        authenticate_plain(b"admin\0alice\0wrong", _verify)
    assert caught.value.client_message == "Authentication failed: Invalid username or password"
