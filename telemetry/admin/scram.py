"""Describe/AlterUserScramCredentials (KIP-554): SCRAM credentials in the metadata store.

Credentials live in the metadata store, salted and hashed; an
AlterUserScramCredentials change is appended (and fsynced) off the event
loop before it is acknowledged. Who may describe or alter them: every
principal when the server has no ``[security]`` section (a Kafka broker
without an authorizer), else only ``super_users``
(CLUSTER_AUTHORIZATION_FAILED, 31, for the others): the one
:class:`~telemetry.admin.authorizer.Authorizer`. Each user an
AlterUserScramCredentials changes draws one token from the caller's strict
``controller_mutation_rate``, as every other admin change does; the users
past the caller's tokens are refused with THROTTLING_QUOTA_EXCEEDED (89).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Final

from telemetry.admin.authorizer import THROTTLED_MESSAGE, Authorizer
from telemetry.errors import ErrorCode
from telemetry.kafka.pending import Pending
from telemetry.metastore import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from telemetry.security import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SaslErrorCode,
    ScramMechanism,
    credential_from_salted_password,
)
from telemetry.wire import MalformedFrameError
from telemetry.wire.admin_apis import (
    AdminApiKey,
    AdminRequest,
    decode_admin_request,
    encode_admin_response,
)
from telemetry.wire.headers import RequestHeader, read_request_header_prefix
from telemetry.wire.primitives import Reader
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
    from telemetry.kafka.connection import PendingResponse
    from telemetry.kafka.connection_state import ConnectionState
    from telemetry.kafka.table import ApiTable
    from telemetry.metastore import MetadataImage, MetadataRecord
    from telemetry.metastore.backend import MetadataBackend

_log = logging.getLogger(__name__)

CLUSTER_AUTHORIZATION_FAILED: Final = 31
RESOURCE_NOT_FOUND: Final = 91
DUPLICATE_RESOURCE: Final = 92
UNACCEPTABLE_CREDENTIAL: Final = 93

_SCRAM_ADMIN_KEYS: Final = frozenset(
    {
        int(AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS),
        int(AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS),
    }
)
#: librdkafka's extra tagged-fields byte, with room for one more.
_MAX_TRAILING_ZEROS: Final = 2


class ScramAdmin:
    """The SCRAM admin APIs of one Kafka listener, over the metadata store."""

    def __init__(
        self,
        authorizer: Authorizer,
        store: MetadataBackend | None,
        *,
        quotas: ClientQuotas | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.authorizer = authorizer
        self.store = store
        #: The strict ``controller_mutation_rate`` every alteration draws from (None: unbounded).
        self.quotas = quotas
        self.clock = clock

    def register(self, table: ApiTable) -> None:
        """Both APIs at v0, behind the listener's SASL gate."""
        table.register(
            int(AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS),
            "DescribeUserScramCredentials",
            (0, 0),
            lambda state, frame, _: self(state, frame),
        )
        table.register(
            int(AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS),
            "AlterUserScramCredentials",
            (0, 0),
            lambda state, frame, _: self(state, frame),
        )

    def authorized(self, state: ConnectionState) -> bool:
        return self.authorizer.may_manage_credentials(state.principal)

    def __call__(self, state: ConnectionState, frame: bytes) -> tuple[bytes, int] | PendingResponse:
        header, request = _decode_scram_admin(frame)
        correlation_id, api_key, version = header.correlation_id, header.api_key, header.api_version
        if isinstance(request, DescribeUserScramCredentialsRequest):
            if not self.authorized(state):
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
        if self.store is None or not self.authorized(state):
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
            self.store.image, request, secured=self.authorizer.super_users is not None
        )
        results += throttled
        if not records:
            answer = AlterUserScramCredentialsResponse(results=results, throttle_time_ms=throttle)
            return encode_admin_response(correlation_id, api_key, version, answer), throttle
        appended = asyncio.get_running_loop().run_in_executor(None, self.store.append, records)

        def durable(_: MetadataImage) -> tuple[bytes, int]:
            response = AlterUserScramCredentialsResponse(results=results, throttle_time_ms=throttle)
            return encode_admin_response(correlation_id, api_key, version, response), throttle

        def failed(error: BaseException) -> tuple[bytes, int]:
            _log.error("the metadata store could not take SCRAM credentials: %s", error)
            refused = tuple(
                dataclasses.replace(
                    result,
                    error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR),
                    error_message="the metadata store could not record the change",
                )
                if result.error_code == 0
                else result
                for result in results
            )
            response = AlterUserScramCredentialsResponse(results=refused, throttle_time_ms=throttle)
            return encode_admin_response(correlation_id, api_key, version, response), throttle

        return Pending(appended, durable, failed)

    def _draw_mutations(
        self, state: ConnectionState, request: AlterUserScramCredentialsRequest
    ) -> tuple[AlterUserScramCredentialsRequest, tuple[AlterUserScramCredentialsResult, ...], int]:
        """One mutation token per user changed; the request narrowed to the admitted users."""
        if self.quotas is None or self.clock is None:
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
    return credential_refusal(upsertion.name, upsertion.mechanism, upsertion.iterations)


def credential_refusal(name: str, mechanism_id: int, iterations: int) -> tuple[int, str] | None:
    """Why AlterUserScramCredentials refuses a credential: (error code, Kafka's message).

    Also the rule a stored credential is read back by (``stored.py``): an
    iteration count far above 16384 would make every login a denial of service.
    """
    if not name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if ScramMechanism.by_id(mechanism_id) is None:
        return int(SaslErrorCode.UNSUPPORTED_SASL_MECHANISM), "Unknown SCRAM mechanism"
    if iterations < MIN_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if iterations > MAX_ITERATIONS:
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
