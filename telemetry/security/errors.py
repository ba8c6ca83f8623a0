"""SASL failures and the Kafka error codes they are answered with.

Kafka's ``SaslServerAuthenticator`` answers every failed SaslAuthenticate with
SASL_AUTHENTICATION_FAILED (58) and then closes the connection. What it puts
in ErrorMessage depends on the exception: a ``SaslAuthenticationException``
sends its own text (``Authentication failed: username not specified``), any
other ``SaslException`` (a malformed SCRAM message, an unknown SCRAM user, a
wrong proof) sends one generic line that names only the mechanism, so a
client learns nothing about which part was wrong.
"""

from __future__ import annotations

import enum


class SaslErrorCode(enum.IntEnum):
    """The SASL error codes of Kafka's ``Errors.java``."""

    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    SASL_AUTHENTICATION_FAILED = 58


def generic_failure_message(mechanism: str) -> str:
    """The ErrorMessage Kafka sends for a ``SaslException`` that is not a
    ``SaslAuthenticationException``."""
    return (
        "Authentication failed during authentication due to invalid credentials "
        f"with SASL mechanism {mechanism}"
    )


class SaslAuthenticationError(Exception):
    """An exchange that failed: answer 58 with :attr:`client_message`, then close.

    ``str(error)`` is the detailed reason for the server's log; it may name
    what was wrong, which the client must not learn when Kafka hides it.
    """

    error_code = SaslErrorCode.SASL_AUTHENTICATION_FAILED

    def __init__(self, reason: str, client_message: str) -> None:
        super().__init__(reason)
        self.client_message = client_message

    @classmethod
    def shown(cls, message: str) -> SaslAuthenticationError:
        """Kafka's ``SaslAuthenticationException``: the client sees the reason."""
        return cls(message, message)

    @classmethod
    def hidden(cls, reason: str, mechanism: str) -> SaslAuthenticationError:
        """Kafka's plain ``SaslException``: the client sees the generic message."""
        return cls(reason, generic_failure_message(mechanism))
