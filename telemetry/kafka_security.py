"""The Kafka listener's security: SASL, SCRAM credential admin, TLS principals.

The listener calls :meth:`KafkaSecurity.screen` with every request frame
before its own decoding. SaslHandshake (17), SaslAuthenticate (36),
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) are
answered here; any other request goes on only if the connection's SASL
session admits it (:class:`telemetry.security.sasl_session.SaslSession`).
The authenticated principal is set on the :class:`ConnectionState`, so it is
the quota user entity, the ``principal`` of every push (the landing's
column) and of the client instance's context.

SCRAM credentials live in the metadata store, salted and hashed; an
AlterUserScramCredentials change is appended (and fsynced) off the event
loop before it is acknowledged. Who may describe or alter them: every
principal when the server has no ``[security]`` section (a Kafka broker
without an authorizer), else only ``super_users``
(CLUSTER_AUTHORIZATION_FAILED, 31, for the others): the admin plane's
:class:`~telemetry.admin.authorizer.AdminAuthorizer`. Each user an
AlterUserScramCredentials changes draws one token from the caller's strict
``controller_mutation_rate``, as every other admin change does; the users
past the caller's tokens are refused with THROTTLING_QUOTA_EXCEEDED (89).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
from typing import TYPE_CHECKING, Final

from telemetry.admin.authorizer import THROTTLED_MESSAGE, AdminAuthorizer
from telemetry.errors import ErrorCode
from telemetry.kafka_connection import CloseConnectionError
from telemetry.metastore import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from telemetry.security import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SaslErrorCode,
    ScramMechanism,
    credential_from_salted_password,
)
from telemetry.security.errors import generic_failure_message
from telemetry.security.password_checks import PasswordChecks, dummy_hash, verify_plain_password
from telemetry.security.plain import PLAIN
from telemetry.security.sasl_session import AuthenticateAnswer, SaslSession, SaslState
from telemetry.security.tls import certificate_principal_name
from telemetry.wire import MalformedFrameError
from telemetry.wire.admin_apis import (
    AdminApiKey,
    AdminRequest,
    decode_admin_request,
    encode_admin_response,
)
from telemetry.wire.api_versions import ApiVersion, ApiVersionsResponse
from telemetry.wire.headers import RequestHeader, read_request_header_prefix
from telemetry.wire.primitives import Reader
from telemetry.wire.sasl_messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from telemetry.wire.scram_messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    CredentialInfo,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
    ScramCredentialUpsertion,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from telemetry.enforcement import ClientQuotas
    from telemetry.kafka_connection import ConnectionState, PendingResponse
    from telemetry.metastore import MetadataImage, MetadataRecord
    from telemetry.metastore.backend import MetadataBackend
    from telemetry.security import ScramCredential
    from telemetry.security.settings import SecuritySettings

_log = logging.getLogger(__name__)

CLUSTER_AUTHORIZATION_FAILED: Final = 31
RESOURCE_NOT_FOUND: Final = 91
DUPLICATE_RESOURCE: Final = 92
UNACCEPTABLE_CREDENTIAL: Final = 93

#: What ApiVersions adds for these keys.
SECURITY_API_VERSIONS: Final = (
    ApiVersion(api_key=int(AdminApiKey.SASL_HANDSHAKE), min_version=0, max_version=1),
    ApiVersion(api_key=int(AdminApiKey.SASL_AUTHENTICATE), min_version=0, max_version=2),
    ApiVersion(
        api_key=int(AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS), min_version=0, max_version=0
    ),
    ApiVersion(api_key=int(AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS), min_version=0, max_version=0),
)
_SERVED: Final = frozenset(entry.api_key for entry in SECURITY_API_VERSIONS)
_SCRAM_ADMIN_KEYS: Final = frozenset(
    {
        int(AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS),
        int(AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS),
    }
)
#: librdkafka's extra tagged-fields byte, with room for one more.
_MAX_TRAILING_ZEROS: Final = 2
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
        authorizer: AdminAuthorizer | None = None,
        quotas: ClientQuotas | None = None,
        checks: PasswordChecks | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.authorizer = authorizer or AdminAuthorizer(
            frozenset(settings.super_users) if settings.configured else None
        )
        self.quotas = quotas
        self.checks = checks or PasswordChecks(settings.password_check_threads)
        self._pending: dict[str, _PendingAuthentication] = {}
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
            state.sasl = SaslSession(
                settings.sasl_mechanisms,
                plain=self._verify_plain,
                scram=self._scram_credential,
                max_reauth_ms=settings.connections_max_reauth_ms,
                # A verified client certificate is an authentication of its own.
                allow_anonymous=settings.allow_anonymous or name is not None,
            )

    def api_versions(self, answer: ApiVersionsResponse) -> ApiVersionsResponse:
        return dataclasses.replace(answer, api_keys=answer.api_keys + SECURITY_API_VERSIONS)

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
            return self._sasl(state, frame)
        if session is not None:
            refusal = session.admits(api_key, self.clock())
            if refusal is not None:
                raise CloseConnectionError(refusal)
        elif not self.settings.allow_anonymous and state.user_is_anonymous:
            raise CloseConnectionError(
                f"Unexpected Kafka request of type {api_key} from an unauthenticated client"
            )
        if api_key in _SERVED:
            return self._scram_admin(state, frame)
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
        _log.info(
            "SASL authentication failed on %s from %s: %s",
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

    # -- SCRAM credentials (KIP-554) ---------------------------------------------------------

    def _authorized(self, state: ConnectionState) -> bool:
        return self.authorizer.may_alter(state.principal)

    def _scram_admin(
        self, state: ConnectionState, frame: bytes
    ) -> tuple[bytes, int] | PendingResponse:
        header, request = _decode_scram_admin(frame)
        correlation_id, api_key, version = header.correlation_id, header.api_key, header.api_version
        if isinstance(request, DescribeUserScramCredentialsRequest):
            if not self._authorized(state):
                refusal = DescribeUserScramCredentialsResponse(
                    results=(),
                    error_code=CLUSTER_AUTHORIZATION_FAILED,
                    error_message="Cluster authorization failed.",
                )
                return encode_admin_response(correlation_id, api_key, version, refusal), 0
            image = self.store.image if self.store is not None else None
            described = describe_scram_credentials(image, request.users)
            return encode_admin_response(correlation_id, api_key, version, described), 0
        assert isinstance(request, AlterUserScramCredentialsRequest)
        if self.store is None or not self._authorized(state):
            code = (
                CLUSTER_AUTHORIZATION_FAILED
                if self.store is not None
                else int(ErrorCode.UNKNOWN_SERVER_ERROR)
            )
            users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
            refused = AlterUserScramCredentialsResponse(
                results=tuple(
                    AlterUserScramCredentialsResult(user=user, error_code=code)
                    for user in dict.fromkeys(users)
                )
            )
            return encode_admin_response(correlation_id, api_key, version, refused), 0
        request, throttled, throttle = self._draw_mutations(state, request)
        results, records = alter_scram_credentials(
            self.store.image, request, secured=self.settings.configured
        )
        results += throttled
        if not records:
            answer = AlterUserScramCredentialsResponse(results=results, throttle_time_ms=throttle)
            return encode_admin_response(correlation_id, api_key, version, answer), throttle
        return _PendingAppend(self.store, records, correlation_id, version, results, throttle)

    def _draw_mutations(
        self, state: ConnectionState, request: AlterUserScramCredentialsRequest
    ) -> tuple[AlterUserScramCredentialsRequest, tuple[AlterUserScramCredentialsResult, ...], int]:
        """One mutation token per user changed; the request narrowed to the admitted users."""
        if self.quotas is None:
            return request, (), 0
        users = list(
            dict.fromkeys(
                [d.name for d in request.deletions] + [u.name for u in request.upsertions]
            )
        )
        admitted, throttle = self.quotas.draw_mutations(state.entity, len(users), self.clock())
        if admitted == len(users):
            return request, (), 0
        keep = frozenset(users[:admitted])
        narrowed = AlterUserScramCredentialsRequest(
            deletions=tuple(d for d in request.deletions if d.name in keep),
            upsertions=tuple(u for u in request.upsertions if u.name in keep),
        )
        throttled = tuple(
            AlterUserScramCredentialsResult(
                user=user,
                error_code=int(ErrorCode.THROTTLING_QUOTA_EXCEEDED),
                error_message=THROTTLED_MESSAGE,
            )
            for user in users[admitted:]
        )
        return narrowed, throttled, throttle


class _PendingAuthentication:
    """A PLAIN check on the password-check pool, or a failure waiting out its delay."""

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


class _PendingAppend:
    """An AlterUserScramCredentials answered once its records are durable."""

    __slots__ = ("_appended", "_correlation_id", "_results", "_throttle", "_version")

    def __init__(
        self,
        store: MetadataBackend,
        records: tuple[MetadataRecord, ...],
        correlation_id: int,
        version: int,
        results: tuple[AlterUserScramCredentialsResult, ...],
        throttle: int,
    ) -> None:
        self._correlation_id = correlation_id
        self._version = version
        self._results = results
        self._throttle = throttle
        loop = asyncio.get_running_loop()
        self._appended = loop.run_in_executor(None, store.append, records)

    def add_done_callback(self, callback: Callable[[tuple[bytes, int]], None]) -> None:
        def done(appended: asyncio.Future[MetadataImage]) -> None:
            results = self._results
            error = None if appended.cancelled() else appended.exception()
            if appended.cancelled() or error is not None:
                _log.error("the metadata store could not take SCRAM credentials: %s", error)
                results = tuple(
                    dataclasses.replace(
                        result,
                        error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR),
                        error_message="the metadata store could not record the change",
                    )
                    if result.error_code == 0
                    else result
                    for result in results
                )
            answer = AlterUserScramCredentialsResponse(
                results=results, throttle_time_ms=self._throttle
            )
            api_key = int(AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS)
            frame = encode_admin_response(self._correlation_id, api_key, self._version, answer)
            callback((frame, self._throttle))

        self._appended.add_done_callback(done)


def _decode_scram_admin(
    frame: bytes,
) -> tuple[RequestHeader, DescribeUserScramCredentialsRequest | AlterUserScramCredentialsRequest]:
    """``decode_admin_request``, except for trailing zero bytes after the request.

    librdkafka (2.16) ends AlterUserScramCredentials with one tagged-fields byte
    too many; Kafka's parser ignores bytes after the request, so the broker
    accepts it. Anything else left over is still malformed.
    """
    reader = Reader(frame)
    header = read_request_header_prefix(reader)
    if header.api_key not in _SCRAM_ADMIN_KEYS or header.api_version != 0:
        return _checked(decode_admin_request(frame))
    reader.tagged_fields()  # both are flexible from v0: request header v2
    if header.api_key == AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        request: DescribeUserScramCredentialsRequest | AlterUserScramCredentialsRequest = (
            AlterUserScramCredentialsRequest.read(reader, 0)
        )
    else:
        request = DescribeUserScramCredentialsRequest.read(reader, 0)
    rest = reader.remaining
    if rest > _MAX_TRAILING_ZEROS or any(reader.raw(rest)):
        raise MalformedFrameError(f"{rest} unexpected trailing bytes after the request")
    return header, request


def _checked(
    decoded: tuple[RequestHeader, AdminRequest],
) -> tuple[RequestHeader, DescribeUserScramCredentialsRequest | AlterUserScramCredentialsRequest]:
    header, request = decoded
    assert isinstance(
        request, DescribeUserScramCredentialsRequest | AlterUserScramCredentialsRequest
    )
    return header, request


def describe_scram_credentials(
    image: MetadataImage | None, users: tuple[str, ...] | None
) -> DescribeUserScramCredentialsResponse:
    """Kafka's ``ScramControlManager.describeScramCredentials`` over the image."""
    by_user: dict[str, list[CredentialInfo]] = {}
    credentials = image.scram_credentials if image is not None else {}
    for (name, mechanism_id), credential in sorted(credentials.items()):
        by_user.setdefault(name, []).append(
            CredentialInfo(mechanism=mechanism_id, iterations=credential.iterations)
        )
    if not users:  # null or empty: every user with a credential
        return DescribeUserScramCredentialsResponse(
            results=tuple(
                DescribeUserScramCredentialsResult(user=name, credential_infos=tuple(infos))
                for name, infos in by_user.items()
            )
        )
    counts: dict[str, int] = {}
    for user in users:
        counts[user] = counts.get(user, 0) + 1
    results = []
    for user in dict.fromkeys(users):
        if counts[user] > 1:
            results.append(
                DescribeUserScramCredentialsResult(
                    user=user,
                    error_code=DUPLICATE_RESOURCE,
                    error_message="Cannot describe SCRAM credentials for the same user twice "
                    "in a single request",
                )
            )
        elif user not in by_user:
            results.append(
                DescribeUserScramCredentialsResult(
                    user=user,
                    error_code=RESOURCE_NOT_FOUND,
                    error_message="Attempt to describe a user credential that does not exist",
                )
            )
        else:
            results.append(
                DescribeUserScramCredentialsResult(user=user, credential_infos=tuple(by_user[user]))
            )
    return DescribeUserScramCredentialsResponse(results=tuple(results))


def _upsertion_refusal(upsertion: ScramCredentialUpsertion) -> tuple[int, str] | None:
    if not upsertion.name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if ScramMechanism.by_id(upsertion.mechanism) is None:
        return int(SaslErrorCode.UNSUPPORTED_SASL_MECHANISM), "Unknown SCRAM mechanism"
    if upsertion.iterations < MIN_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion.iterations > MAX_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


def alter_scram_credentials(
    image: MetadataImage, request: AlterUserScramCredentialsRequest, *, secured: bool = False
) -> tuple[tuple[AlterUserScramCredentialsResult, ...], tuple[MetadataRecord, ...]]:
    """Kafka's ``ScramControlManager.alterCredentials``: a result per user, the records to append.

    A user named twice in one request fails as a whole (DUPLICATE_RESOURCE);
    otherwise each deletion and upsertion is checked on its own: an unknown
    mechanism (33), iterations outside 4096..16384 or an empty name (93), a
    deletion of a credential that does not exist (91).
    """
    counts: dict[str, int] = {}
    for name in [d.name for d in request.deletions] + [u.name for u in request.upsertions]:
        counts[name] = counts.get(name, 0) + 1
    errors: dict[str, tuple[int, str]] = {}
    records: dict[str, list[MetadataRecord]] = {}
    for name, count in counts.items():
        if count > 1:
            errors[name] = (
                DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
    for deletion in request.deletions:
        if deletion.name in errors:
            continue
        mechanism = ScramMechanism.by_id(deletion.mechanism)
        if mechanism is None:
            errors[deletion.name] = (
                int(SaslErrorCode.UNSUPPORTED_SASL_MECHANISM),
                "Unknown SCRAM mechanism",
            )
        elif (deletion.name, mechanism.mechanism_id) not in image.scram_credentials:
            errors[deletion.name] = (
                RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            records.setdefault(deletion.name, []).append(
                RemoveUserScramCredentialRecord(name=deletion.name, mechanism=deletion.mechanism)
            )
    for upsertion in request.upsertions:
        if upsertion.name in errors:
            continue
        refusal = _upsertion_refusal(upsertion)
        if refusal is not None:
            errors[upsertion.name] = refusal
            continue
        mechanism = ScramMechanism.by_id(upsertion.mechanism)
        assert mechanism is not None  # checked by _upsertion_refusal
        credential = credential_from_salted_password(
            mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations
        )
        records.setdefault(upsertion.name, []).append(
            UserScramCredentialRecord(
                name=upsertion.name,
                mechanism=mechanism.mechanism_id,
                salt=credential.salt,
                stored_key=credential.stored_key,
                server_key=credential.server_key,
                iterations=credential.iterations,
                secured=secured,
            )
        )
    results = tuple(
        AlterUserScramCredentialsResult(
            user=name,
            error_code=errors[name][0] if name in errors else 0,
            error_message=errors[name][1] if name in errors else None,
        )
        for name in counts
    )
    accepted = tuple(r for name, rs in records.items() if name not in errors for r in rs)
    return results, accepted


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
