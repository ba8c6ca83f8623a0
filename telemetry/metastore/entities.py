"""The metadata topic's messages: one per entity, keyed by record type and entity.

A compacted topic keeps the *last* message of each key, so a message must
carry the whole state of what its key names, not a change to it:

========================  =================================  ==========================
record type               key (JSON)                         value
========================  =================================  ==========================
ConfigRecord              ``["config", 16, "<name>"]``       every dynamic key of the
                                                             subscription
ClientQuotaRecord         ``["quota", [["user", "alice"]]]`` every key of the entity
                          (entity sorted by type, null =
                          the default entity)
UserScramCredentialRecord ``["scram", "<user>", 1]``         the credential
========================  =================================  ==========================

The value is one frame of ``records.py`` (its CRC32C, KRaft's record
serialisation) holding the records that rebuild the entity; a tombstone
(null value) means the entity is gone. The keys of one entity change
together, so what one request changes on one subscription or one quota
entity is one message and applies all or nothing. Applying a message
replaces the entity's state in the image with the message's, so every node
that applies the topic in order ends with the same image: the last message
of each key wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from telemetry.metastore.image import MetadataImage, scram_record
from telemetry.metastore.records import (
    ClientQuotaRecord,
    ConfigRecord,
    RecordFormatError,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
    encode_batch,
    read_frames,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from telemetry.metastore.backend import StateCheck
    from telemetry.metastore.image import QuotaEntity
    from telemetry.metastore.records import MetadataRecord

CONFIG: Final = "config"
QUOTA: Final = "quota"
SCRAM: Final = "scram"


@dataclass(frozen=True, slots=True)
class ConfigEntity:
    resource_type: int
    name: str


@dataclass(frozen=True, slots=True)
class QuotaEntityKey:
    entity: QuotaEntity


@dataclass(frozen=True, slots=True)
class ScramEntity:
    user: str
    mechanism: int


Entity = ConfigEntity | QuotaEntityKey | ScramEntity

Message = tuple[bytes, bytes | None]
"""A topic message: key and value (None: a tombstone)."""


def entity_of(record: MetadataRecord) -> Entity:
    """What ``record`` changes, as the topic keys it."""
    match record:
        case ConfigRecord():
            return ConfigEntity(record.resource_type, record.resource_name)
        case ClientQuotaRecord():
            return QuotaEntityKey(record.entity)
        case UserScramCredentialRecord() | RemoveUserScramCredentialRecord():
            return ScramEntity(record.name, record.mechanism)


def encode_key(entity: Entity) -> bytes:
    """The same entity gives the same bytes on every node (compaction compares bytes)."""
    value: list[object]
    match entity:
        case ConfigEntity():
            value = [CONFIG, entity.resource_type, entity.name]
        case QuotaEntityKey():
            value = [QUOTA, [list(pair) for pair in entity.entity]]
        case ScramEntity():
            value = [SCRAM, entity.user, entity.mechanism]
    return json.dumps(value, separators=(",", ":")).encode()


def _is_entity_pair(pair: object) -> bool:
    return (
        isinstance(pair, list)
        and len(pair) == 2
        and isinstance(pair[0], str)
        and (pair[1] is None or isinstance(pair[1], str))
    )


def decode_key(key: bytes) -> Entity:
    """Raises ``RecordFormatError`` for a key kip714 does not write."""
    try:
        value = json.loads(key)
    except RecursionError:  # a key of 50,000 nested "[": kip714 writes 3 levels at most
        raise RecordFormatError("metadata key is nested too deep to be kip714's") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise RecordFormatError(f"metadata key is not JSON: {error}") from None
    match value:
        case ["config", int() as resource_type, str() as name]:
            return ConfigEntity(resource_type, name)
        case ["quota", list() as pairs] if all(_is_entity_pair(pair) for pair in pairs):
            return QuotaEntityKey(tuple(sorted(((t, n) for t, n in pairs), key=lambda p: p[0])))
        case ["scram", str() as user, int() as mechanism]:
            return ScramEntity(user, mechanism)
    raise RecordFormatError(f"unknown metadata key {key[:200]!r}")


def entity_state(image: MetadataImage, entity: Entity) -> tuple[MetadataRecord, ...]:
    """The records that rebuild ``entity`` as ``image`` has it (empty: it does not exist)."""
    match entity:
        case ConfigEntity(resource_type, name):
            keys = image.configs.get((resource_type, name), {})
            return tuple(
                ConfigRecord(resource_type=resource_type, resource_name=name, name=key, value=value)
                for key, value in sorted(keys.items())
            )
        case QuotaEntityKey(quota_entity):
            values = image.client_quotas.get(quota_entity, {})
            return tuple(
                ClientQuotaRecord(entity=quota_entity, key=key, value=value)
                for key, value in sorted(values.items())
            )
        case ScramEntity(user, mechanism):
            credential = image.scram_credentials.get((user, mechanism))
            if credential is None:
                return ()
            secured = image.scram_origins.get((user, mechanism))
            return (scram_record(user, mechanism, credential, secured),)


def messages_for(image: MetadataImage, records: Iterable[MetadataRecord]) -> list[Message]:
    """The messages that take the topic from ``image`` to ``image`` + ``records``.

    One message per entity the records touch, in the order first touched.
    """
    batch = tuple(records)
    after = image.apply(batch)
    entities = list(dict.fromkeys(entity_of(record) for record in batch))
    return [encode_message(after, entity) for entity in entities]


def encode_message(image: MetadataImage, entity: Entity) -> Message:
    state = entity_state(image, entity)
    return encode_key(entity), (encode_batch(0, state) if state else None)


def image_messages(image: MetadataImage) -> list[Message]:
    """Every entity of ``image`` as a message (what a migration writes)."""
    return messages_for(type(image)(), image.to_records())


def decode_value(entity: Entity, value: bytes | None) -> tuple[MetadataRecord, ...]:
    """The entity's new state; every record must set a part of the key's entity.

    Raises:
        RecordFormatError: a damaged frame, or records of another entity.
    """
    if value is None:
        return ()
    batches, _, reason = read_frames(value)
    if reason is not None or len(batches) != 1:
        raise RecordFormatError(f"metadata value is not one frame: {reason or 'several'}")
    state = batches[0].records
    for record in state:
        removes = (
            isinstance(record, RemoveUserScramCredentialRecord)
            or (isinstance(record, ClientQuotaRecord) and record.remove)
            or (isinstance(record, ConfigRecord) and record.value is None)
        )
        if removes or entity_of(record) != entity:
            raise RecordFormatError(f"the message of {entity} holds {record!r}")
    return state


def read_message(
    key: bytes, value: bytes | None, check: StateCheck | None = None
) -> tuple[Entity | None, tuple[MetadataRecord, ...], Exception | None]:
    """A topic message as ``(entity, state, None)``, or why it must be skipped.

    Never raises for what a message holds: a key that is not kip714's (even
    one nested 50,000 deep) gives ``(None, (), error)``; a value that cannot
    be decoded, that the image refuses or that ``check`` (the admin plane's
    rules: a NaN quota, ``interval.ms = -5``) refuses gives
    ``(entity, (), error)``: the entity is left without a state, which is
    also what a node reading the compacted topic later finds, so every node
    holds the same image.
    """
    entity: Entity | None = None
    try:
        entity = decode_key(key)
        state = decode_value(entity, value)
        if state:
            MetadataImage().apply(state)  # a value the image refuses fails here
            if check is not None:
                check(state)
    except Exception as error:  # any message, however made, is skipped
        return entity, (), error
    return entity, state, None


def replacing(
    image: MetadataImage, entity: Entity, state: tuple[MetadataRecord, ...]
) -> tuple[MetadataRecord, ...]:
    """The records that turn ``entity`` in ``image`` into ``state`` (removals first)."""
    removals: list[MetadataRecord] = []
    for record in entity_state(image, entity):
        match record:
            case ConfigRecord() if not any(
                isinstance(r, ConfigRecord) and r.name == record.name for r in state
            ):
                removals.append(
                    ConfigRecord(
                        resource_type=record.resource_type,
                        resource_name=record.resource_name,
                        name=record.name,
                        value=None,
                    )
                )
            case ClientQuotaRecord() if not any(
                isinstance(r, ClientQuotaRecord) and r.key == record.key for r in state
            ):
                removals.append(
                    ClientQuotaRecord(entity=record.entity, key=record.key, remove=True)
                )
            case UserScramCredentialRecord() if not state:
                removals.append(
                    RemoveUserScramCredentialRecord(name=record.name, mechanism=record.mechanism)
                )
    return (*removals, *state)
