"""One connection's SASL state, as Kafka's ``SaslServerAuthenticator`` keeps it.

Pure: no I/O, and time is a parameter. The listener asks :meth:`SaslSession.admits`
before serving any other request, and hands SaslHandshake (17) and
SaslAuthenticate (36) to :meth:`handshake` and :meth:`authenticate`; each
answer says whether the connection closes after it.

The rules are Kafka's:

* Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate
  are served (``Unexpected Kafka request of type X during SASL handshake``,
  then close) unless the listener lets anonymous connections push.
* SaslHandshake names an enabled mechanism, else UNSUPPORTED_SASL_MECHANISM
  (33) with the enabled list, then close. A SaslHandshake or SaslAuthenticate
  out of order is ILLEGAL_SASL_STATE (34), then close.
* A failed exchange is SASL_AUTHENTICATION_FAILED (58), then close.
* KIP-368: with ``connections.max.reauth.ms`` > 0 the session lasts that long
  (``SessionLifetimeMs`` in SaslAuthenticate v1+); a SaslHandshake on an
  authenticated connection starts re-authentication with the same mechanism
  and must end with the same principal; a connection whose session expired is
  closed at its next request other than that SaslHandshake.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from telemetry.security.errors import SaslAuthenticationError, SaslErrorCode
from telemetry.security.plain import PLAIN, authenticate_plain
from telemetry.security.scram import ScramMechanism, ScramServer

if TYPE_CHECKING:
    from collections.abc import Callable

    from telemetry.security.scram import ScramCredential

#: Served whatever the state: a client learns the versions before it authenticates.
API_VERSIONS_KEY: Final = 18
SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36


class SaslState(enum.Enum):
    INITIAL = "initial"  # nothing yet (or served anonymously)
    HANDSHAKE = "handshake"  # a mechanism is chosen; SaslAuthenticate next
    EXCHANGE = "exchange"  # a multi-round mechanism (SCRAM) is half way
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class HandshakeAnswer:
    error_code: int
    mechanisms: tuple[str, ...]
    close: bool


@dataclass(frozen=True, slots=True)
class AuthenticateAnswer:
    error_code: int = 0
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0
    close: bool = False
    #: The principal name once an exchange completes, else None.
    authenticated: str | None = None
    #: Whether the completed exchange was a KIP-368 re-authentication.
    reauthenticated: bool = False
    #: Why it failed, in full, for the server's log only.
    reason: str | None = None


class SaslSession:
    """The SASL state machine of one Kafka connection; see the module docstring."""

    __slots__ = (
        "_allow_anonymous",
        "_exchange",
        "_max_reauth_ms",
        "_mechanism",
        "_mechanisms",
        "_plain",
        "_scram",
        "expires_at_ms",
        "principal_name",
        "raw_tokens",
        "state",
    )

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        *,
        plain: Callable[[str, str], bool],
        scram: Callable[[ScramMechanism, str], ScramCredential | None],
        max_reauth_ms: int = 0,
        allow_anonymous: bool = False,
    ) -> None:
        self._mechanisms = mechanisms
        self._plain = plain
        self._scram = scram
        self._max_reauth_ms = max_reauth_ms
        self._allow_anonymous = allow_anonymous
        self._mechanism: str | None = None
        self._exchange: ScramServer | None = None
        self.state = SaslState.INITIAL
        #: The authenticated name (``alice`` for ``User:alice``); None until then.
        self.principal_name: str | None = None
        #: When the session ends (KIP-368); None while it never does.
        self.expires_at_ms: int | None = None
        #: After SaslHandshake v0 the tokens come raw (no SaslAuthenticate) until done.
        self.raw_tokens = False

    @property
    def mechanism(self) -> str | None:
        """The mechanism the last SaslHandshake chose."""
        return self._mechanism

    def admits(self, api_key: int, now_ms: int) -> str | None:
        """None if a request with ``api_key`` (not 17 or 36) may be served; else why to close."""
        if api_key == API_VERSIONS_KEY and self.state is not SaslState.FAILED:
            return None
        if self.state is SaslState.AUTHENTICATED:
            if self.expires_at_ms is not None and now_ms >= self.expires_at_ms:
                return "the SASL session expired without re-authentication (KIP-368)"
            return None
        if self.state is SaslState.INITIAL and self._allow_anonymous:
            return None
        if self.principal_name is not None:  # re-authenticating
            return f"Unexpected Kafka request of type {api_key} during SASL re-authentication."
        return f"Unexpected Kafka request of type {api_key} during SASL handshake."

    def handshake(self, mechanism: str, *, raw_tokens: bool = False) -> HandshakeAnswer:
        """SaslHandshake: choose a mechanism (again, for KIP-368 re-authentication).

        ``raw_tokens`` (SaslHandshake v0): the exchange's tokens come without
        Kafka framing; such a client never re-authenticates.
        """
        enabled = self._mechanisms
        if self.state not in (SaslState.INITIAL, SaslState.AUTHENTICATED):
            self.state = SaslState.FAILED
            return HandshakeAnswer(int(SaslErrorCode.ILLEGAL_SASL_STATE), enabled, close=True)
        reauthenticating = self.state is SaslState.AUTHENTICATED
        if mechanism not in enabled or (reauthenticating and mechanism != self._mechanism):
            self.state = SaslState.FAILED
            return HandshakeAnswer(
                int(SaslErrorCode.UNSUPPORTED_SASL_MECHANISM), enabled, close=True
            )
        if raw_tokens and reauthenticating:
            self.state = SaslState.FAILED
            return HandshakeAnswer(int(SaslErrorCode.ILLEGAL_SASL_STATE), enabled, close=True)
        self._mechanism = mechanism
        self._exchange = None
        self.raw_tokens = raw_tokens
        self.state = SaslState.HANDSHAKE
        return HandshakeAnswer(0, enabled, close=False)

    def authenticate(self, token: bytes, version: int, now_ms: int) -> AuthenticateAnswer:
        """SaslAuthenticate: one token of the exchange the handshake chose."""
        mechanism = self._mechanism
        if self.state not in (SaslState.HANDSHAKE, SaslState.EXCHANGE) or mechanism is None:
            self.state = SaslState.FAILED
            return AuthenticateAnswer(
                error_code=int(SaslErrorCode.ILLEGAL_SASL_STATE),
                error_message="Unexpected SaslAuthenticate request: no SaslHandshake before it",
                close=True,
            )
        try:
            reply, name = self._evaluate(mechanism, token)
        except SaslAuthenticationError as error:
            self.state = SaslState.FAILED
            return AuthenticateAnswer(
                error_code=int(error.error_code),
                error_message=error.client_message,
                close=True,
                reason=str(error),
            )
        if name is None:
            self.state = SaslState.EXCHANGE
            return AuthenticateAnswer(auth_bytes=reply)
        previous = self.principal_name
        if previous is not None and previous != name:
            self.state = SaslState.FAILED
            message = (
                f"Cannot change principals during re-authentication from User:{previous}: "
                f"User:{name}"
            )
            return AuthenticateAnswer(
                error_code=int(SaslErrorCode.SASL_AUTHENTICATION_FAILED),
                error_message=message,
                close=True,
                reason=message,
            )
        self.state = SaslState.AUTHENTICATED
        self.raw_tokens = False
        self.principal_name = name
        lifetime = self._max_reauth_ms
        self.expires_at_ms = now_ms + lifetime if lifetime > 0 else None
        return AuthenticateAnswer(
            auth_bytes=reply,
            # SaslAuthenticate v0 has no field for it: such a client never re-authenticates.
            session_lifetime_ms=lifetime if version >= 1 else 0,
            authenticated=name,
            reauthenticated=previous is not None,
        )

    def _evaluate(self, mechanism: str, token: bytes) -> tuple[bytes, str | None]:
        """The reply token, and the principal name once the exchange is complete."""
        if mechanism == PLAIN:
            return b"", authenticate_plain(token, self._plain)
        exchange = self._exchange
        if exchange is None:
            scram = ScramMechanism.by_name(mechanism)
            assert scram is not None  # the handshake accepts only enabled mechanisms
            lookup = self._scram
            exchange = self._exchange = ScramServer(scram, lambda user: lookup(scram, user))
        reply = exchange.evaluate_response(token)
        return reply, exchange.username if exchange.complete else None
