"""SASL mechanisms for the Kafka listener: PLAIN and SCRAM-SHA-256/512, server side.

Pure functions and small state machines over byte tokens; no I/O, no clock.
The Kafka listener (``telemetry.kafka.authenticator``) feeds them SaslAuthenticate
tokens through each connection's :class:`~telemetry.security.sasl_session.SaslSession`
and maps :class:`SaslAuthenticationError` to Kafka's error 58. ``settings``
holds the ``[security]`` values and ``tls`` the listeners' TLS (``cryptography``
reads client certificates); the rest depends on the standard library only.
"""

from __future__ import annotations

from telemetry.security.errors import (
    SaslAuthenticationError,
    SaslErrorCode,
    generic_failure_message,
)
from telemetry.security.plain import PLAIN, PlainResponse, authenticate_plain, parse_plain_response
from telemetry.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_salted_password,
    derive_credential,
    salted_password,
    verify_password,
)

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "PLAIN",
    "PlainResponse",
    "SaslAuthenticationError",
    "SaslErrorCode",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "authenticate_plain",
    "credential_from_salted_password",
    "derive_credential",
    "generic_failure_message",
    "parse_plain_response",
    "salted_password",
    "verify_password",
]
