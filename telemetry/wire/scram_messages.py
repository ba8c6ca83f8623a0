"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) v0 (KIP-554).

Both are flexible from v0. The client derives the salted password itself and
sends it with the salt (``ScramCredentialUpsertion.SaltedPassword``); the
broker never sees the password, and stores only the keys derived from it.
librdkafka sends 51 only to a broker that advertises 50.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Self

from telemetry.wire.primitives import MAX_ADMIN_ITEMS

if TYPE_CHECKING:
    from telemetry.wire.primitives import Reader, Writer


class ScramMechanismId(enum.IntEnum):
    """``ScramMechanism`` ids as these messages carry them."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


def _read_user_name(reader: Reader) -> str:
    name = reader.string(compact=True)
    reader.tagged_fields()
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeUserScramCredentialsRequest:
    """``users`` None describes every user with a credential."""

    users: tuple[str, ...] | None = None

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        users = reader.nullable_array(_read_user_name, compact=True, limit=MAX_ADMIN_ITEMS)
        reader.tagged_fields()
        return cls(users=None if users is None else tuple(users))

    def write(self, writer: Writer, version: int) -> None:
        users = self.users
        writer.nullable_array_length(None if users is None else len(users), compact=True)
        for user in users or ():
            writer.string(user, compact=True)
            writer.tagged_fields()
        writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class CredentialInfo:
    mechanism: int
    iterations: int


def _read_credential_info(reader: Reader) -> CredentialInfo:
    info = CredentialInfo(mechanism=reader.int8(), iterations=reader.int32())
    reader.tagged_fields()
    return info


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeUserScramCredentialsResult:
    user: str
    error_code: int = 0
    error_message: str | None = None
    credential_infos: tuple[CredentialInfo, ...] = ()


def _read_describe_result(reader: Reader) -> DescribeUserScramCredentialsResult:
    user = reader.string(compact=True)
    error_code = reader.int16()
    error_message = reader.nullable_string(compact=True)
    infos = tuple(reader.array(_read_credential_info, compact=True))
    reader.tagged_fields()
    return DescribeUserScramCredentialsResult(
        user=user, error_code=error_code, error_message=error_message, credential_infos=infos
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeUserScramCredentialsResponse:
    results: tuple[DescribeUserScramCredentialsResult, ...]
    error_code: int = 0
    error_message: str | None = None
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        throttle_time_ms = reader.int32()
        error_code = reader.int16()
        error_message = reader.nullable_string(compact=True)
        results = tuple(reader.array(_read_describe_result, compact=True))
        reader.tagged_fields()
        return cls(
            results=results,
            error_code=error_code,
            error_message=error_message,
            throttle_time_ms=throttle_time_ms,
        )

    def write(self, writer: Writer, version: int) -> None:
        writer.int32(self.throttle_time_ms)
        writer.int16(self.error_code)
        writer.nullable_string(self.error_message, compact=True)
        writer.array_length(len(self.results), compact=True)
        for result in self.results:
            writer.string(result.user, compact=True)
            writer.int16(result.error_code)
            writer.nullable_string(result.error_message, compact=True)
            writer.array_length(len(result.credential_infos), compact=True)
            for info in result.credential_infos:
                writer.int8(info.mechanism)
                writer.int32(info.iterations)
                writer.tagged_fields()
            writer.tagged_fields()
        writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredentialDeletion:
    name: str
    mechanism: int


def _read_deletion(reader: Reader) -> ScramCredentialDeletion:
    deletion = ScramCredentialDeletion(name=reader.string(compact=True), mechanism=reader.int8())
    reader.tagged_fields()
    return deletion


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredentialUpsertion:
    """``salted_password`` is Hi(password, salt, iterations), secret: kept out of ``repr``."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes = field(repr=False)


def _read_upsertion(reader: Reader) -> ScramCredentialUpsertion:
    upsertion = ScramCredentialUpsertion(
        name=reader.string(compact=True),
        mechanism=reader.int8(),
        iterations=reader.int32(),
        salt=reader.bytes_(compact=True),
        salted_password=reader.bytes_(compact=True),
    )
    reader.tagged_fields()
    return upsertion


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterUserScramCredentialsRequest:
    deletions: tuple[ScramCredentialDeletion, ...] = ()
    upsertions: tuple[ScramCredentialUpsertion, ...] = ()

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        deletions = tuple(reader.array(_read_deletion, compact=True, limit=MAX_ADMIN_ITEMS))
        upsertions = tuple(reader.array(_read_upsertion, compact=True, limit=MAX_ADMIN_ITEMS))
        reader.tagged_fields()
        return cls(deletions=deletions, upsertions=upsertions)

    def write(self, writer: Writer, version: int) -> None:
        writer.array_length(len(self.deletions), compact=True)
        for deletion in self.deletions:
            writer.string(deletion.name, compact=True)
            writer.int8(deletion.mechanism)
            writer.tagged_fields()
        writer.array_length(len(self.upsertions), compact=True)
        for upsertion in self.upsertions:
            writer.string(upsertion.name, compact=True)
            writer.int8(upsertion.mechanism)
            writer.int32(upsertion.iterations)
            writer.bytes_(upsertion.salt, compact=True)
            writer.bytes_(upsertion.salted_password, compact=True)
            writer.tagged_fields()
        writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterUserScramCredentialsResult:
    user: str
    error_code: int = 0
    error_message: str | None = None


def _read_alter_result(reader: Reader) -> AlterUserScramCredentialsResult:
    result = AlterUserScramCredentialsResult(
        user=reader.string(compact=True),
        error_code=reader.int16(),
        error_message=reader.nullable_string(compact=True),
    )
    reader.tagged_fields()
    return result


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterUserScramCredentialsResponse:
    results: tuple[AlterUserScramCredentialsResult, ...]
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        throttle_time_ms = reader.int32()
        results = tuple(reader.array(_read_alter_result, compact=True))
        reader.tagged_fields()
        return cls(results=results, throttle_time_ms=throttle_time_ms)

    def write(self, writer: Writer, version: int) -> None:
        writer.int32(self.throttle_time_ms)
        writer.array_length(len(self.results), compact=True)
        for result in self.results:
            writer.string(result.user, compact=True)
            writer.int16(result.error_code)
            writer.nullable_string(result.error_message, compact=True)
            writer.tagged_fields()
        writer.tagged_fields()
