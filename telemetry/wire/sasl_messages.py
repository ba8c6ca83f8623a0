"""SaslHandshake (17) v0–v1 and SaslAuthenticate (36) v0–v2, following Kafka's schemas.

SaslHandshake is never flexible (KAFKA-9577 forbids bumping it, so any broker
can read it). SaslAuthenticate is flexible from v2 and carries
``SessionLifetimeMs`` (KIP-368) from v1. librdkafka sends Handshake v1 and
Authenticate v1 and needs AuthBytes present even when empty, so the response
field is non-nullable bytes as in the schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Self

if TYPE_CHECKING:
    from telemetry.wire.primitives import Reader, Writer

SASL_AUTHENTICATE_FLEXIBLE_SINCE: Final = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslHandshakeRequest:
    mechanism: str

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        return cls(mechanism=reader.string(compact=False))

    def write(self, writer: Writer, version: int) -> None:
        writer.string(self.mechanism, compact=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslHandshakeResponse:
    """``mechanisms`` lists the enabled mechanisms, also (and mainly) on error 33."""

    error_code: int = 0
    mechanisms: tuple[str, ...] = ()

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        error_code = reader.int16()
        mechanisms = tuple(reader.array(lambda r: r.string(compact=False), compact=False))
        return cls(error_code=error_code, mechanisms=mechanisms)

    def write(self, writer: Writer, version: int) -> None:
        writer.int16(self.error_code)
        writer.array_length(len(self.mechanisms), compact=False)
        for mechanism in self.mechanisms:
            writer.string(mechanism, compact=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslAuthenticateRequest:
    """One SASL token from the client; kept out of ``repr`` (PLAIN carries the password)."""

    auth_bytes: bytes = field(repr=False)

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= SASL_AUTHENTICATE_FLEXIBLE_SINCE
        auth_bytes = reader.bytes_(flexible)
        if flexible:
            reader.tagged_fields()
        return cls(auth_bytes=auth_bytes)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= SASL_AUTHENTICATE_FLEXIBLE_SINCE
        writer.bytes_(self.auth_bytes, flexible)
        if flexible:
            writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslAuthenticateResponse:
    """``session_lifetime_ms`` 0 means no re-authentication (KIP-368); on the wire from v1."""

    error_code: int = 0
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= SASL_AUTHENTICATE_FLEXIBLE_SINCE
        error_code = reader.int16()
        error_message = reader.nullable_string(flexible)
        auth_bytes = reader.bytes_(flexible)
        session_lifetime_ms = reader.int64() if version >= 1 else 0
        if flexible:
            reader.tagged_fields()
        return cls(
            error_code=error_code,
            error_message=error_message,
            auth_bytes=auth_bytes,
            session_lifetime_ms=session_lifetime_ms,
        )

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= SASL_AUTHENTICATE_FLEXIBLE_SINCE
        writer.int16(self.error_code)
        writer.nullable_string(self.error_message, flexible)
        writer.bytes_(self.auth_bytes, flexible)
        if version >= 1:
            writer.int64(self.session_lifetime_ms)
        if flexible:
            writer.tagged_fields()
