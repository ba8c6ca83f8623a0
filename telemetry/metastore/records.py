"""The metadata records and the batch body that carries them (body format 1).

Records are KRaft's metadata records, encoded the way KRaft's
``MetadataRecordSerde`` encodes them: ``frame_version`` 1, ``api_key`` and
``version`` as unsigned varints, then the message with flexible (compact)
encodings and an empty tagged-field section::

    ConfigRecord                      key 4   ResourceType int8, ResourceName, Name, Value?
    UserScramCredentialRecord         key 11  Name, Mechanism int8, Salt, StoredKey,
                                              ServerKey, Iterations int32,
                                              tag 10000: Secured bool (kip714's own)
    RemoveUserScramCredentialRecord   key 12  Name, Mechanism int8
    ClientQuotaRecord                 key 14  Entity[] {EntityType, EntityName?},
                                              Key, Value float64, Remove bool

A *batch* is the records of one accepted request, appended atomically as one
frame (frames.py) with one checksum, so a torn write loses the whole request,
never half::

    body  := format:u8 (1)  base_offset:i64be  count:u32be  record × count

The body's checksum is CRC32C (Castagnoli). Record *i* of a batch has
offset ``base_offset + i``; offsets count records from 0 and never repeat.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

import crc32c

from telemetry.wire.errors import MalformedFrameError
from telemetry.wire.primitives import Reader, Writer

FORMAT_VERSION: Final = 1
HEADER: Final = struct.Struct("<II")
"""A format-1 frame's ``length:u32le crc:u32le``: Kafka topic values, and stores written
before format 2 (frames.py)."""
_BATCH_HEAD: Final = struct.Struct(">BqI")
MIN_BODY: Final = _BATCH_HEAD.size
_FLOAT64: Final = struct.Struct(">d")
MAX_BODY: Final = 64 * 1024 * 1024
"""A format limit, so recovery judges every frame by the same rule."""

_FRAME_VERSION: Final = 1
CONFIG_RECORD: Final = 4
USER_SCRAM_CREDENTIAL_RECORD: Final = 11
REMOVE_USER_SCRAM_CREDENTIAL_RECORD: Final = 12
CLIENT_QUOTA_RECORD: Final = 14
SECURED_TAG: Final = 10_000
"""The tag of UserScramCredentialRecord's Secured field: far above Kafka's own tags."""


class RecordFormatError(Exception):
    """A frame or record that cannot be trusted: torn, corrupt, or unknown."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord:
    """KRaft's ConfigRecord: ``value`` None deletes the key."""

    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotaRecord:
    """KRaft's ClientQuotaRecord; an entity name None is the default entity.

    ``entity`` is kept sorted by type, so equal entities compare equal.
    """

    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float = 0.0
    remove: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "entity", tuple(sorted(self.entity, key=lambda e: e[0])))


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialRecord:
    """KRaft's UserScramCredentialRecord: salted and hashed, never the password."""

    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int
    #: Whether ``[security]`` was set when the credential was made; None: unknown
    #: (written before kip714 recorded it). A tagged field, which Kafka ignores.
    secured: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveUserScramCredentialRecord:
    name: str
    mechanism: int


MetadataRecord = (
    ConfigRecord | ClientQuotaRecord | UserScramCredentialRecord | RemoveUserScramCredentialRecord
)


def _write_record(writer: Writer, record: MetadataRecord) -> None:
    writer.uvarint(_FRAME_VERSION)
    match record:
        case ConfigRecord():
            writer.uvarint(CONFIG_RECORD)
            writer.uvarint(0)
            writer.int8(record.resource_type)
            writer.string(record.resource_name, compact=True)
            writer.string(record.name, compact=True)
            writer.nullable_string(record.value, compact=True)
        case ClientQuotaRecord():
            writer.uvarint(CLIENT_QUOTA_RECORD)
            writer.uvarint(0)
            writer.array_length(len(record.entity), compact=True)
            for entity_type, entity_name in record.entity:
                writer.string(entity_type, compact=True)
                writer.nullable_string(entity_name, compact=True)
                writer.tagged_fields()
            writer.string(record.key, compact=True)
            writer.raw(_FLOAT64.pack(record.value))
            writer.boolean(record.remove)
        case UserScramCredentialRecord():
            writer.uvarint(USER_SCRAM_CREDENTIAL_RECORD)
            writer.uvarint(0)
            writer.string(record.name, compact=True)
            writer.int8(record.mechanism)
            writer.bytes_(record.salt, compact=True)
            writer.bytes_(record.stored_key, compact=True)
            writer.bytes_(record.server_key, compact=True)
            writer.int32(record.iterations)
            if record.secured is not None:
                writer.uvarint(1)  # one tagged field
                writer.uvarint(SECURED_TAG)
                writer.uvarint(1)
                writer.boolean(record.secured)
                return
        case RemoveUserScramCredentialRecord():
            writer.uvarint(REMOVE_USER_SCRAM_CREDENTIAL_RECORD)
            writer.uvarint(0)
            writer.string(record.name, compact=True)
            writer.int8(record.mechanism)
    writer.tagged_fields()


def _read_entity(reader: Reader) -> tuple[str, str | None]:
    entity = (reader.string(compact=True), reader.nullable_string(compact=True))
    reader.tagged_fields()
    return entity


def _read_record(reader: Reader) -> MetadataRecord:
    frame_version, api_key, version = reader.uvarint(), reader.uvarint(), reader.uvarint()
    if frame_version != _FRAME_VERSION or version != 0:
        raise RecordFormatError(f"unknown record framing {frame_version}/{api_key}/{version}")
    record: MetadataRecord
    if api_key == CONFIG_RECORD:
        record = ConfigRecord(
            resource_type=reader.int8(),
            resource_name=reader.string(compact=True),
            name=reader.string(compact=True),
            value=reader.nullable_string(compact=True),
        )
    elif api_key == CLIENT_QUOTA_RECORD:
        entity = tuple(reader.array(_read_entity, compact=True))
        key = reader.string(compact=True)
        (value,) = reader.unpack(_FLOAT64)
        record = ClientQuotaRecord(entity=entity, key=key, value=value, remove=reader.boolean())
    elif api_key == USER_SCRAM_CREDENTIAL_RECORD:
        name, mechanism = reader.string(compact=True), reader.int8()
        salt, stored_key = reader.bytes_(compact=True), reader.bytes_(compact=True)
        server_key, iterations = reader.bytes_(compact=True), reader.int32()
        secured = _read_tags(reader).get(SECURED_TAG)
        return UserScramCredentialRecord(
            name=name,
            mechanism=mechanism,
            salt=salt,
            stored_key=stored_key,
            server_key=server_key,
            iterations=iterations,
            secured=None if secured is None else secured != b"\0",
        )
    elif api_key == REMOVE_USER_SCRAM_CREDENTIAL_RECORD:
        record = RemoveUserScramCredentialRecord(
            name=reader.string(compact=True), mechanism=reader.int8()
        )
    else:
        raise RecordFormatError(f"unknown metadata record type {api_key}")
    reader.tagged_fields()
    return record


def _read_tags(reader: Reader) -> dict[int, bytes]:
    """A KIP-482 tagged-field section, kept: tag → raw value."""
    tags = {}
    for _ in range(reader.uvarint()):
        tag = reader.uvarint()
        tags[tag] = reader.raw(reader.uvarint())
    return tags


def encode_body(base_offset: int, records: tuple[MetadataRecord, ...]) -> bytes:
    """The body of one frame holding ``records`` at offsets ``base_offset`` onwards.

    Raises:
        ValueError: a field does not fit the format, or the body exceeds ``MAX_BODY``.
    """
    writer = Writer()
    writer.raw(_BATCH_HEAD.pack(FORMAT_VERSION, base_offset, len(records)))
    for record in records:
        _write_record(writer, record)
    body = writer.getvalue()
    if len(body) > MAX_BODY:
        raise ValueError(f"metadata batch of {len(body)} bytes exceeds {MAX_BODY}")
    return body


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    records: tuple[MetadataRecord, ...]

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


def decode_body(body: bytes, crc: int) -> Batch:
    """Verify and decode a frame body.

    Raises:
        RecordFormatError: checksum mismatch, unknown version, or undecodable records.
    """
    if crc32c.crc32c(body) != crc:
        raise RecordFormatError("CRC32C mismatch")
    if len(body) < _BATCH_HEAD.size:
        raise RecordFormatError("batch header cut short")
    version, base_offset, count = _BATCH_HEAD.unpack_from(body)
    if version != FORMAT_VERSION:
        raise RecordFormatError(f"unknown batch format version {version}")
    reader = Reader(body, _BATCH_HEAD.size)
    if count > reader.remaining:  # every record takes at least one byte
        raise RecordFormatError(f"record count {count} cannot fit the batch")
    try:
        records = tuple(_read_record(reader) for _ in range(count))
        reader.expect_end()
    except MalformedFrameError as error:
        raise RecordFormatError(str(error)) from error
    return Batch(base_offset, records)


def encode_batch(base_offset: int, records: tuple[MetadataRecord, ...]) -> bytes:
    """One format-1 frame (``length:u32le crc:u32le body``): a metadata topic message's value.

    Raises:
        ValueError: a field does not fit the format, or the body exceeds ``MAX_BODY``.
    """
    body = encode_body(base_offset, records)
    return HEADER.pack(len(body), crc32c.crc32c(body)) + body


def read_frames(data: bytes) -> tuple[list[Batch], int, str | None]:
    """Decode consecutive format-1 frames from the start of ``data``.

    Returns the batches read, the byte position where the valid prefix ends,
    and why reading stopped there (None if ``data`` ended on a frame boundary).
    Offsets must run on without gaps from one batch to the next.
    """
    batches: list[Batch] = []
    position = 0
    while position < len(data):
        if len(data) - position < HEADER.size:
            return batches, position, "torn frame header"
        length, crc = HEADER.unpack_from(data, position)
        if length > MAX_BODY or length < MIN_BODY:
            return batches, position, f"impossible frame length {length}"
        end = position + HEADER.size + length
        if end > len(data):
            return batches, position, "torn frame body"
        try:
            batch = decode_body(data[position + HEADER.size : end], crc)
        except RecordFormatError as error:
            return batches, position, str(error)
        if batches and batch.base_offset != batches[-1].next_offset:
            return (
                batches,
                position,
                f"batch at offset {batch.base_offset} does not follow {batches[-1].next_offset}",
            )
        batches.append(batch)
        position = end
    return batches, position, None
