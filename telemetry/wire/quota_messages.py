"""DescribeClientQuotas (48) and AlterClientQuotas (49) v0–v1, the KIP-546 quota APIs.

Field order follows Kafka's ``DescribeClientQuotas{Request,Response}.json`` and
``AlterClientQuotas{Request,Response}.json`` (flexible from v1). A default
entity is a null ``entity_name`` on the wire; quota values are IEEE float64
(Java ``writeDouble``, big-endian), whatever the key's ConfigDef type.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self

from telemetry.wire.primitives import MAX_ADMIN_ITEMS

if TYPE_CHECKING:
    from telemetry.wire.primitives import Reader, Writer

QUOTAS_FLEXIBLE_SINCE: Final = 1
_FLOAT64: Final = struct.Struct(">d")


class QuotaMatchType(enum.IntEnum):
    """``DescribeClientQuotasRequest`` match types (KIP-546)."""

    EXACT = 0
    DEFAULT = 1
    SPECIFIED = 2  # "any name": in KRaft also the default entity (ClientQuotasImage)


def _read_float64(reader: Reader) -> float:
    (value,) = reader.unpack(_FLOAT64)
    return float(value)


def _write_float64(writer: Writer, value: float) -> None:
    writer.raw(_FLOAT64.pack(value))


@dataclass(frozen=True, slots=True, kw_only=True)
class EntityData:
    """One component of a quota entity; ``entity_name`` None is the default entity."""

    entity_type: str
    entity_name: str | None


def _read_entity(reader: Reader, flexible: bool) -> EntityData:
    entity = EntityData(
        entity_type=reader.string(flexible), entity_name=reader.nullable_string(flexible)
    )
    if flexible:
        reader.tagged_fields()
    return entity


def _write_entity(writer: Writer, entity: tuple[EntityData, ...], flexible: bool) -> None:
    writer.array_length(len(entity), flexible)
    for component in entity:
        writer.string(component.entity_type, flexible)
        writer.nullable_string(component.entity_name, flexible)
        if flexible:
            writer.tagged_fields()


# ---------------------------------------------------------------- DescribeClientQuotas (48)


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentData:
    """A filter component; ``match`` must be set for EXACT and null otherwise."""

    entity_type: str
    match_type: int
    match: str | None


def _read_component(reader: Reader, flexible: bool) -> ComponentData:
    component = ComponentData(
        entity_type=reader.string(flexible),
        match_type=reader.int8(),
        match=reader.nullable_string(flexible),
    )
    if flexible:
        reader.tagged_fields()
    return component


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClientQuotasRequest:
    components: tuple[ComponentData, ...]
    strict: bool = False

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= QUOTAS_FLEXIBLE_SINCE
        components = tuple(
            reader.array(lambda r: _read_component(r, flexible), flexible, limit=MAX_ADMIN_ITEMS)
        )
        strict = reader.boolean()
        if flexible:
            reader.tagged_fields()
        return cls(components=components, strict=strict)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= QUOTAS_FLEXIBLE_SINCE
        writer.array_length(len(self.components), flexible)
        for component in self.components:
            writer.string(component.entity_type, flexible)
            writer.int8(component.match_type)
            writer.nullable_string(component.match, flexible)
            if flexible:
                writer.tagged_fields()
        writer.boolean(self.strict)
        if flexible:
            writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaValue:
    key: str
    value: float


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClientQuotasEntry:
    entity: tuple[EntityData, ...]
    values: tuple[QuotaValue, ...]


def _read_value(reader: Reader, flexible: bool) -> QuotaValue:
    value = QuotaValue(key=reader.string(flexible), value=_read_float64(reader))
    if flexible:
        reader.tagged_fields()
    return value


def _read_describe_entry(reader: Reader, flexible: bool) -> DescribeClientQuotasEntry:
    entity = tuple(reader.array(lambda r: _read_entity(r, flexible), flexible))
    values = tuple(reader.array(lambda r: _read_value(r, flexible), flexible))
    if flexible:
        reader.tagged_fields()
    return DescribeClientQuotasEntry(entity=entity, values=values)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClientQuotasResponse:
    """``entries`` is None on an error: Kafka fails the whole describe, not an entry."""

    entries: tuple[DescribeClientQuotasEntry, ...] | None
    error_code: int = 0
    error_message: str | None = None
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= QUOTAS_FLEXIBLE_SINCE
        throttle_time_ms = reader.int32()
        error_code = reader.int16()
        error_message = reader.nullable_string(flexible)
        entries = reader.nullable_array(lambda r: _read_describe_entry(r, flexible), flexible)
        if flexible:
            reader.tagged_fields()
        return cls(
            entries=None if entries is None else tuple(entries),
            error_code=error_code,
            error_message=error_message,
            throttle_time_ms=throttle_time_ms,
        )

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= QUOTAS_FLEXIBLE_SINCE
        writer.int32(self.throttle_time_ms)
        writer.int16(self.error_code)
        writer.nullable_string(self.error_message, flexible)
        entries = self.entries
        writer.nullable_array_length(None if entries is None else len(entries), flexible)
        for entry in entries or ():
            _write_entity(writer, entry.entity, flexible)
            writer.array_length(len(entry.values), flexible)
            for value in entry.values:
                writer.string(value.key, flexible)
                _write_float64(writer, value.value)
                if flexible:
                    writer.tagged_fields()
            if flexible:
                writer.tagged_fields()
        if flexible:
            writer.tagged_fields()


# ---------------------------------------------------------------- AlterClientQuotas (49)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaOp:
    """Set ``key`` to ``value``, or remove it (``remove`` ignores ``value``)."""

    key: str
    value: float
    remove: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterClientQuotasEntry:
    entity: tuple[EntityData, ...]
    ops: tuple[QuotaOp, ...]


def _read_op(reader: Reader, flexible: bool) -> QuotaOp:
    op = QuotaOp(key=reader.string(flexible), value=_read_float64(reader), remove=reader.boolean())
    if flexible:
        reader.tagged_fields()
    return op


def _read_alter_entry(reader: Reader, flexible: bool) -> AlterClientQuotasEntry:
    entity = tuple(
        reader.array(lambda r: _read_entity(r, flexible), flexible, limit=MAX_ADMIN_ITEMS)
    )
    ops = tuple(reader.array(lambda r: _read_op(r, flexible), flexible, limit=MAX_ADMIN_ITEMS))
    if flexible:
        reader.tagged_fields()
    return AlterClientQuotasEntry(entity=entity, ops=ops)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterClientQuotasRequest:
    entries: tuple[AlterClientQuotasEntry, ...]
    validate_only: bool = False

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= QUOTAS_FLEXIBLE_SINCE
        entries = tuple(
            reader.array(lambda r: _read_alter_entry(r, flexible), flexible, limit=MAX_ADMIN_ITEMS)
        )
        validate_only = reader.boolean()
        if flexible:
            reader.tagged_fields()
        return cls(entries=entries, validate_only=validate_only)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= QUOTAS_FLEXIBLE_SINCE
        writer.array_length(len(self.entries), flexible)
        for entry in self.entries:
            _write_entity(writer, entry.entity, flexible)
            writer.array_length(len(entry.ops), flexible)
            for op in entry.ops:
                writer.string(op.key, flexible)
                _write_float64(writer, op.value)
                writer.boolean(op.remove)
                if flexible:
                    writer.tagged_fields()
            if flexible:
                writer.tagged_fields()
        writer.boolean(self.validate_only)
        if flexible:
            writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterClientQuotasResult:
    """The outcome for one entity; Kafka reports each entity separately."""

    entity: tuple[EntityData, ...]
    error_code: int = 0
    error_message: str | None = None


def _read_alter_result(reader: Reader, flexible: bool) -> AlterClientQuotasResult:
    error_code = reader.int16()
    error_message = reader.nullable_string(flexible)
    entity = tuple(reader.array(lambda r: _read_entity(r, flexible), flexible))
    if flexible:
        reader.tagged_fields()
    return AlterClientQuotasResult(
        entity=entity, error_code=error_code, error_message=error_message
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterClientQuotasResponse:
    entries: tuple[AlterClientQuotasResult, ...]
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= QUOTAS_FLEXIBLE_SINCE
        throttle_time_ms = reader.int32()
        entries = tuple(reader.array(lambda r: _read_alter_result(r, flexible), flexible))
        if flexible:
            reader.tagged_fields()
        return cls(entries=entries, throttle_time_ms=throttle_time_ms)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= QUOTAS_FLEXIBLE_SINCE
        writer.int32(self.throttle_time_ms)
        writer.array_length(len(self.entries), flexible)
        for entry in self.entries:
            writer.int16(entry.error_code)
            writer.nullable_string(entry.error_message, flexible)
            _write_entity(writer, entry.entity, flexible)
            if flexible:
                writer.tagged_fields()
        if flexible:
            writer.tagged_fields()
