"""The Kafka listener's security: SASL, TLS principals, and the gate to SCRAM credential admin.

The listener calls :meth:`KafkaSecurity.screen` with every request frame
before its own decoding. SaslHandshake (17), SaslAuthenticate (36),
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) are
answered here; any other request goes on only if the connection's SASL
session admits it (:class:`telemetry.security.sasl_session.SaslSession`).
The authenticated principal is set on the :class:`ConnectionState`, so it is
the quota user entity, the ``principal`` of every push (the landing's
column) and of the client instance's context.

The two SCRAM admin requests are handed to the ``scram_admin`` handler the
composition root gives (``telemetry.admin.scram``), once the session admits them.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING, Final

from telemetry.enforcement import RateLimitedLog
from telemetry.kafka.connection import CloseConnectionError
from telemetry.security import (
    SaslErrorCode,
    ScramMechanism,
)
from telemetry.security.errors import generic_failure_message
from telemetry.security.password_checks import PasswordChecks, dummy_hash, verify_plain_password
from telemetry.security.plain import PLAIN
from telemetry.security.sasl_session import AuthenticateAnswer, SaslSession, SaslState
from telemetry.security.tls import certificate_principal_name
from telemetry.wire.admin_apis import (
    AdminApiKey,
    decode_admin_request,
    encode_admin_response,
)
from telemetry.wire.headers import RequestHeader
from telemetry.wire.sasl_messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from telemetry.kafka.connection import PendingResponse
    from telemetry.kafka.connection_state import ConnectionState
    from telemetry.kafka.table import ApiSet, ApiTable
    from telemetry.metastore.backend import MetadataBackend
    from telemetry.security import ScramCredential
    from telemetry.security.settings import SecuritySettings

_log = logging.getLogger(__name__)

_SASL_KEYS: Final = frozenset({int(AdminApiKey.SASL_HANDSHAKE), int(AdminApiKey.SASL_AUTHENTICATE)})


_API_NAMES: Final = {
    int(AdminApiKey.SASL_HANDSHAKE): "SaslHandshake",
    int(AdminApiKey.SASL_AUTHENTICATE): "SaslAuthenticate",
    int(AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS): "DescribeUserScramCredentials",
    int(AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS): "AlterUserScramCredentials",
}
_API_KEY: Final = struct.Struct(">h")
_SIZE: Final = struct.Struct(">i")


def security_api_name(frame: bytes) -> str:
    """The name a request answered by :meth:`KafkaSecurity.screen` is counted under."""
    return _API_NAMES.get(_API_KEY.unpack_from(frame)[0], "Unknown")


class KafkaSecurity:
    """SASL sessions, SCRAM admin and TLS principals for one Kafka listener."""

    def __init__(
        self,
        settings: SecuritySettings,
        store: MetadataBackend | None,
        clock: Callable[[], int],
        *,
        scram_admin: ApiSet,
        checks: PasswordChecks | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        #: Describe/AlterUserScramCredentials (KIP-554), served by the admin plane.
        self.scram_admin = scram_admin
        self.checks = checks or PasswordChecks(settings.password_check_threads)
        self._pending: dict[str, _PendingAuthentication] = {}
        #: A flood of failed attempts writes one line per address and minute.
        self._failure_log = RateLimitedLog(_log, logging.INFO)
        self._dummy = dummy_hash(settings.plain_users)
        #: Completed authentications, re-authentications and failures, for tests and metrics.
        self.authentications = 0
        self.reauthentications = 0
        self.failures = 0

    # -- connections -------------------------------------------------------------------------

    def connection_opened(self, state: ConnectionState, ssl_object: object) -> None:
        """A TLS client certificate names the principal; SASL, if enabled, may replace it."""
        name = certificate_principal_name(ssl_object) if ssl_object is not None else None  # type: ignore[arg-type]
        if name is not None:
            state.authenticate(name)
        settings = self.settings
        if settings.sasl_enabled:
            state.authentication_required = not (settings.allow_anonymous or name is not None)
            state.sasl = SaslSession(
                settings.sasl_mechanisms,
                plain=self._verify_plain,
                scram=self._scram_credential,
                max_reauth_ms=settings.connections_max_reauth_ms,
                # A verified client certificate is an authentication of its own.
                allow_anonymous=settings.allow_anonymous or name is not None,
            )

    def register(self, table: ApiTable) -> None:
        """SaslHandshake and SaslAuthenticate, then the SCRAM credential APIs (KIP-554)."""
        table.register(
            int(AdminApiKey.SASL_HANDSHAKE),
            "SaslHandshake",
            (0, 1),
            lambda state, frame, _: self._sasl(state, frame),
        )
        table.register(
            int(AdminApiKey.SASL_AUTHENTICATE),
            "SaslAuthenticate",
            (0, 2),
            lambda state, frame, _: self._sasl(state, frame),
        )
        self.scram_admin.register(table)

    def screen(
        self, state: ConnectionState, frame: bytes
    ) -> tuple[bytes, int] | PendingResponse | None:
        """Answer the security keys; None lets the listener serve any other admitted request.

        Raises:
            CloseConnectionError: the request may not be served (the session
                does not admit it) or the exchange failed (its answer attached).
            telemetry.wire.MalformedFrameError: a security request that does not decode.
        """
        session = state.sasl
        if session is not None and session.raw_tokens:
            return self._raw_token(state, session, frame)
        api_key = _API_KEY.unpack_from(frame)[0] if len(frame) >= _API_KEY.size else -1
        if api_key in _SASL_KEYS:
            return None  # the SASL rows of the API table answer them, whatever the session
        if session is not None:
            refusal = session.admits(api_key, self.clock())
            if refusal is not None:
                raise CloseConnectionError(refusal)
        elif not self.settings.allow_anonymous and state.user_is_anonymous:
            raise CloseConnectionError(
                f"Unexpected Kafka request of type {api_key} from an unauthenticated client"
            )
        return None

    # -- SASL --------------------------------------------------------------------------------

    def _sasl(self, state: ConnectionState, frame: bytes) -> tuple[bytes, int] | PendingResponse:
        header, request = decode_admin_request(frame)
        version = header.api_version
        session = state.sasl
        if isinstance(request, SaslHandshakeRequest):
            if session is None:
                # A listener without SASL: Kafka's KafkaApis answers ILLEGAL_SASL_STATE.
                answer = SaslHandshakeResponse(error_code=int(SaslErrorCode.ILLEGAL_SASL_STATE))
                return _close_after(state, header, answer, "SASL is not enabled")
            # v0: the tokens that follow are raw, size-prefixed, with no Kafka header.
            handshake = session.handshake(request.mechanism, raw_tokens=version == 0)
            response = SaslHandshakeResponse(
                error_code=handshake.error_code, mechanisms=handshake.mechanisms
            )
            if handshake.close:
                reason = (
                    f"SaslHandshake refused: {request.mechanism!r} (error {handshake.error_code})"
                )
                return _close_after(state, header, response, reason)
            return encode_admin_response(
                header.correlation_id, header.api_key, version, response
            ), 0
        assert isinstance(request, SaslAuthenticateRequest)
        if session is None:
            answer_auth = SaslAuthenticateResponse(
                error_code=int(SaslErrorCode.ILLEGAL_SASL_STATE),
                error_message="SASL is not enabled on this listener",
            )
            return _close_after(state, header, answer_auth, "SASL is not enabled")
        return self._exchange(
            state,
            session,
            request.auth_bytes,
            version,
            lambda outcome: self._answer(state, header, outcome),
        )

    def _raw_token(
        self, state: ConnectionState, session: SaslSession, token: bytes
    ) -> tuple[bytes, int] | PendingResponse:
        """A SASL token after SaslHandshake v0: Kafka's legacy framing, a size prefix and the
        token each way. A failure just closes the connection: the framing has no error field.
        """
        return self._exchange(
            state, session, token, 0, lambda outcome: self._raw_answer(state, outcome)
        )

    def _raw_answer(self, state: ConnectionState, outcome: AuthenticateAnswer) -> tuple[bytes, int]:
        if outcome.close:
            self._failed(state, outcome)
            return b"", 0
        self._authenticated(state, outcome)
        return _SIZE.pack(len(outcome.auth_bytes)) + outcome.auth_bytes, 0

    def _exchange(
        self,
        state: ConnectionState,
        session: SaslSession,
        token: bytes,
        version: int,
        answer: Callable[[AuthenticateAnswer], tuple[bytes, int]],
    ) -> tuple[bytes, int] | PendingResponse:
        """Run one token through the session.

        A PLAIN check (one PBKDF2: ~50 ms at 100 000 iterations) runs on the
        password-check pool, dropped if the connection closes first. A failed
        authentication is answered only after ``failed_authentication_delay_ms``
        (Kafka's ``connection.failed.authentication.delay.ms``), then closed.
        """
        now_ms = self.clock()
        delay_s = self.settings.failed_authentication_delay_ms / 1000
        if session.state is SaslState.HANDSHAKE and session.mechanism == PLAIN:
            exchange = self.checks.run(session.authenticate, token, version, now_ms)
        else:
            outcome = session.authenticate(token, version, now_ms)
            if not outcome.close or delay_s <= 0:
                return answer(outcome)
            exchange = asyncio.get_running_loop().create_future()
            exchange.set_result(outcome)
        connection_id = state.connection_id
        pending = _PendingAuthentication(
            exchange, answer, delay_s, lambda: self._pending.pop(connection_id, None)
        )
        self._pending[connection_id] = pending
        return pending

    def connection_closed(self, state: ConnectionState) -> None:
        """The peer left: drop its password check if not run yet, answer a delayed failure now."""
        pending = self._pending.pop(state.connection_id, None)
        if pending is not None:
            pending.drop()

    def _failed(self, state: ConnectionState, outcome: AuthenticateAnswer) -> None:
        self.failures += 1
        self._failure_log(
            state.address,
            "sasl",
            "SASL authentication failed on %s from %s: %s "
            "(further failures from this address within a minute are not logged)",
            state.connection_id,
            state.address,
            outcome.reason or outcome.error_message,
        )
        state.closing = "SASL authentication failed"

    def _authenticated(self, state: ConnectionState, outcome: AuthenticateAnswer) -> None:
        if outcome.authenticated is None:
            return
        if outcome.reauthenticated:
            self.reauthentications += 1
        else:
            self.authentications += 1
        state.authenticate(outcome.authenticated)
        _log.debug(
            "%s %s as User:%s",
            state.connection_id,
            "re-authenticated" if outcome.reauthenticated else "authenticated",
            outcome.authenticated,
        )

    def _answer(
        self, state: ConnectionState, header: RequestHeader, outcome: AuthenticateAnswer
    ) -> tuple[bytes, int]:
        """The SaslAuthenticate response; the principal is set, or the connection is to close."""
        response = SaslAuthenticateResponse(
            error_code=outcome.error_code,
            error_message=outcome.error_message,
            auth_bytes=outcome.auth_bytes,
            session_lifetime_ms=outcome.session_lifetime_ms,
        )
        if outcome.close:
            self._failed(state, outcome)
        else:
            self._authenticated(state, outcome)
        frame = encode_admin_response(
            header.correlation_id, header.api_key, header.api_version, response
        )
        return frame, 0

    def _verify_plain(self, username: str, password: str) -> bool:
        return verify_plain_password(self.settings.plain_users, self._dummy, username, password)

    def _scram_credential(self, mechanism: ScramMechanism, username: str) -> ScramCredential | None:
        if self.store is None:
            return None
        return self.store.image.scram_credentials.get((username, mechanism.mechanism_id))


class _PendingAuthentication:
    """A PLAIN check on the password-check pool, or a failure waiting out its delay.

    Not a :class:`~telemetry.kafka.pending.Pending`: it can be dropped when its
    connection closes, and a failure is answered only after the delay.
    """

    __slots__ = ("_answer", "_callback", "_delay_s", "_exchange", "_forget", "_timer")

    def __init__(
        self,
        exchange: asyncio.Future[AuthenticateAnswer],
        answer: Callable[[AuthenticateAnswer], tuple[bytes, int]],
        delay_s: float,
        forget: Callable[[], object],
    ) -> None:
        self._exchange = exchange
        self._answer = answer
        self._delay_s = delay_s
        self._forget = forget
        self._callback: Callable[[tuple[bytes, int]], None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def add_done_callback(self, callback: Callable[[tuple[bytes, int]], None]) -> None:
        self._callback = callback
        self._exchange.add_done_callback(self._checked)

    def drop(self) -> None:
        """The connection is gone: no hash for it, no delay to wait out."""
        if not self._exchange.done():
            self._exchange.cancel()  # a queued check never runs; _checked answers
        elif self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._finish(self._exchange.result())

    def _checked(self, exchange: asyncio.Future[AuthenticateAnswer]) -> None:
        if exchange.cancelled():  # the connection closed (or the server stops) first
            self._finish(_failure("the connection closed before the password check ran"))
            return
        error = exchange.exception()
        if error is not None:
            _log.error("checking a SASL/PLAIN password failed: %s", error)
            outcome = _failure(f"the password check failed: {error}")
        else:
            outcome = exchange.result()
        if outcome.close and self._delay_s > 0:
            self._timer = asyncio.get_running_loop().call_later(
                self._delay_s, self._finish, outcome
            )
        else:
            self._finish(outcome)

    def _finish(self, outcome: AuthenticateAnswer) -> None:
        self._timer = None
        self._forget()
        if self._callback is not None:
            self._callback(self._answer(outcome))


def _failure(reason: str) -> AuthenticateAnswer:
    return AuthenticateAnswer(
        error_code=int(SaslErrorCode.SASL_AUTHENTICATION_FAILED),
        error_message=generic_failure_message(PLAIN),
        close=True,
        reason=reason,
    )


def _close_after(
    state: ConnectionState,
    header: RequestHeader,
    response: SaslHandshakeResponse | SaslAuthenticateResponse,
    reason: str,
) -> tuple[bytes, int]:
    """Kafka answers a failed SASL step, then closes the connection."""
    state.closing = reason
    return encode_admin_response(
        header.correlation_id, header.api_key, header.api_version, response
    ), 0
