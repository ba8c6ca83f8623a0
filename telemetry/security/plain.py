"""SASL/PLAIN (RFC 4616) as Kafka's ``PlainSaslServer`` checks it.

One round: the client sends ``[authzid] NUL authcid NUL passwd`` and the server
answers empty bytes or fails. The checks and their messages are Kafka's, in
Kafka's order: exactly three NUL-separated tokens (else the generic failure),
a username, a password, the credentials, and an authorization id that is
empty or equal to the username (librdkafka sends it empty, kafka-python and
aiokafka send the username).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from telemetry.security.errors import SaslAuthenticationError

if TYPE_CHECKING:
    from collections.abc import Callable

PLAIN: Final = "PLAIN"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainResponse:
    """A parsed client token; the password never appears in ``repr``."""

    authorization_id: str
    username: str
    password: str = field(repr=False)


def parse_plain_response(token: bytes) -> PlainResponse:
    """Split the client token as Kafka's ``PlainSaslServer.extractTokens`` does.

    Kafka reads at most four NUL-separated pieces and requires exactly three,
    so a password containing NUL is refused rather than truncated.

    Raises:
        SaslAuthenticationError: not valid UTF-8 or not three tokens (the
            generic message), or an empty username or password (Kafka's own text).
    """
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError.hidden("SASL/PLAIN response is not UTF-8", PLAIN) from None
    tokens = text.split("\0", 3)
    if len(tokens) != 3:
        raise SaslAuthenticationError.hidden(
            f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}", PLAIN
        )
    authorization_id, username, password = tokens
    if not username:
        raise SaslAuthenticationError.shown("Authentication failed: username not specified")
    if not password:
        raise SaslAuthenticationError.shown("Authentication failed: password not specified")
    return PlainResponse(authorization_id=authorization_id, username=username, password=password)


def authenticate_plain(token: bytes, verify_password: Callable[[str, str], bool]) -> str:
    """Run the PLAIN exchange; return the authenticated username (the principal name).

    ``verify_password(username, password)`` checks against stored salted hashes
    (for example :func:`telemetry.security.scram.verify_password`), never plain text.

    Raises:
        SaslAuthenticationError: with Kafka's message for what failed.
    """
    response = parse_plain_response(token)
    if not verify_password(response.username, response.password):
        raise SaslAuthenticationError.shown("Authentication failed: Invalid username or password")
    if response.authorization_id and response.authorization_id != response.username:
        raise SaslAuthenticationError.shown(
            "Authentication failed: Client requested an authorization id that is different "
            "from username"
        )
    return response.username
