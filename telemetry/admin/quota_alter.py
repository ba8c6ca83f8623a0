"""AlterClientQuotas and DescribeClientQuotas over the image, as KRaft's
``ClientQuotaControlManager`` evaluates them (KIP-546).

kip714's keys: ``push_byte_rate`` (bytes/s of PushTelemetry payloads, the
produce-quota analogue; Kafka's name ``producer_byte_rate`` is accepted as an
alias and stored as ``push_byte_rate``), ``request_percentage`` and
``controller_mutation_rate`` for user / client-id entities, and
``connection_creation_rate`` for an ``ip`` entity alone. kip714 has no Fetch,
so ``consumer_byte_rate`` is an invalid key. Every refusal is INVALID_REQUEST
(42) per entity with Kafka's message, except two kip714 choices: an ``ip``
name must be an IP literal (no DNS lookup on the admin path, where Kafka
accepts any resolvable host), and a non-finite value is refused.
"""

from __future__ import annotations

import enum
import ipaddress
import math
from typing import TYPE_CHECKING, Final

from telemetry.errors import ErrorCode, InvalidRequestError, TelemetryError
from telemetry.metastore.records import ClientQuotaRecord
from telemetry.wire.quota_messages import (
    AlterClientQuotasResult,
    DescribeClientQuotasEntry,
    EntityData,
    QuotaMatchType,
    QuotaValue,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from telemetry.metastore.image import MetadataImage, QuotaEntity
    from telemetry.wire.quota_messages import AlterClientQuotasEntry, ComponentData

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
PUSH_BYTE_RATE: Final = "push_byte_rate"
KEY_ALIASES: Final = {"producer_byte_rate": PUSH_BYTE_RATE}
#: The stored keys under the names Kafka's own tools know them by, for the Kafka listener.
KAFKA_KEY_NAMES: Final = {stored: kafka for kafka, stored in KEY_ALIASES.items()}


class _Type(enum.Enum):
    LONG = "a LONG"
    INT = "an INT"
    DOUBLE = "a DOUBLE"


_CLIENT_KEYS: Final = {
    PUSH_BYTE_RATE: _Type.LONG,
    "push_decoded_byte_rate": _Type.LONG,
    "request_percentage": _Type.DOUBLE,
    "controller_mutation_rate": _Type.DOUBLE,
}
_IP_KEYS: Final = {"connection_creation_rate": _Type.INT}
_LIMITS: Final = {_Type.LONG: 2**63 - 1, _Type.INT: 2**31 - 1}


class UnsupportedEntityTypeError(TelemetryError):
    """A describe filter naming an entity type Kafka does not know: UNSUPPORTED_VERSION."""

    error_code = ErrorCode.UNSUPPORTED_VERSION


def _entity_text(entity: Sequence[EntityData]) -> str:
    # ClientQuotaEntity.toString(): "ClientQuotaEntity(entries={user=alice})".
    inner = ", ".join(f"{e.entity_type}={e.entity_name}" for e in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def _entity_key(entity: Sequence[EntityData]) -> QuotaEntity:
    return tuple(sorted(((e.entity_type, e.entity_name) for e in entity), key=lambda e: e[0]))


def _validate_entity(entity: Sequence[EntityData]) -> dict[str, str | None]:
    """``validateEntity`` then ``configKeysForEntityType``: the entity's map and keys."""
    if not entity:
        raise InvalidRequestError("Invalid empty client quota entity")
    validated: dict[str, str | None] = {}
    for component in entity:
        entity_type, name = component.entity_type, component.entity_name
        if entity_type in validated:
            raise InvalidRequestError(
                f"Invalid client quota entity, duplicate entity entry {entity_type}"
            )
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidRequestError(f"Unhandled client quota entity type: {entity_type}")
        validated[entity_type] = name
        if name is not None and not name:
            raise InvalidRequestError(f"Empty {entity_type} not supported")
    if IP in validated:
        if len(validated) > 1:
            # Kafka's literal text, space missing between "should" and "not".
            raise InvalidRequestError(
                "Invalid quota entity combination, IP entity shouldnot be combined with "
                "User or ClientId"
            )
        address = validated[IP]
        if address is not None:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise InvalidRequestError(
                    f"{address} is not a valid IP or resolvable host."
                ) from None
    return validated


def _validate_value(keys: Mapping[str, _Type], key: str, value: float) -> None:
    """``validateQuotaKeyValue``."""
    kind = keys.get(key)
    if kind is None:
        raise InvalidRequestError(f"Invalid configuration key {key}")
    if not math.isfinite(value) or value <= 0.0:
        raise InvalidRequestError(f"Quota {key} must be greater than 0")
    if kind is _Type.DOUBLE:
        return
    if value > _LIMITS[kind]:
        raise InvalidRequestError(f"Proposed value for {key} is too large for {kind.value}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise InvalidRequestError(f"{key} cannot be a fractional value.")


def check_stored_quotas(entity: QuotaEntity, values: Mapping[str, float]) -> None:
    """AlterClientQuotas' rules on an entity read back from the metadata store.

    Raises:
        InvalidRequestError: what AlterClientQuotas would answer for it.
    """
    validated = _validate_entity(
        [EntityData(entity_type=entity_type, entity_name=name) for entity_type, name in entity]
    )
    keys = _IP_KEYS if IP in validated else _CLIENT_KEYS
    for key, value in values.items():
        _validate_value(keys, key, value)


def _entry_records(
    image: MetadataImage, entry: AlterClientQuotasEntry, alterations: Mapping[str, float | None]
) -> list[ClientQuotaRecord]:
    validated = _validate_entity(entry.entity)
    keys = _IP_KEYS if IP in validated else _CLIENT_KEYS
    entity = _entity_key(entry.entity)
    current = image.client_quotas.get(entity, {})
    records = []
    for key, value in alterations.items():
        if value is None:
            if key in current:
                records.append(ClientQuotaRecord(entity=entity, key=key, remove=True))
            continue
        _validate_value(keys, key, value)
        if current.get(key) != value:  # only a change is recorded
            records.append(ClientQuotaRecord(entity=entity, key=key, value=value))
    return records


def alter_client_quotas(
    image: MetadataImage, entries: Sequence[AlterClientQuotasEntry]
) -> tuple[tuple[ClientQuotaRecord, ...], tuple[AlterClientQuotasResult, ...]]:
    """Records for the entries that pass, and one result per distinct entity.

    Entities that fail produce no records and do not stop the others; the
    caller appends the records as one batch (``ControllerResult.atomicOf``),
    or none of them for ``validate_only``.
    """
    records: list[ClientQuotaRecord] = []
    results: dict[QuotaEntity, AlterClientQuotasResult] = {}
    for entry in entries:
        entity = _entity_key(entry.entity)
        alterations: dict[str, float | None] = {}
        duplicate_key = False
        for op in entry.ops:
            key = KEY_ALIASES.get(op.key, op.key)
            duplicate_key = duplicate_key or key in alterations
            alterations.setdefault(key, None if op.remove else op.value)
        if duplicate_key or entity in results:
            # Kafka first answers a repeated key with "Duplicate quota key k not
            # updating quota for this entity", then overwrites that answer with
            # this one because it checks "entity already answered" next; kept.
            results[entity] = AlterClientQuotasResult(
                entity=entry.entity,
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"Ignoring duplicate entity {_entity_text(entry.entity)}",
            )
            continue
        try:
            entry_records = _entry_records(image, entry, alterations)
        except InvalidRequestError as refusal:
            results[entity] = AlterClientQuotasResult(
                entity=entry.entity, error_code=refusal.error_code, error_message=str(refusal)
            )
            continue
        records.extend(entry_records)
        results[entity] = AlterClientQuotasResult(entity=entry.entity)
    return tuple(records), tuple(results.values())


def _parse_filter(components: Sequence[ComponentData]) -> tuple[dict[str, str | None], set[str]]:
    """The filter as (type → exact name or None for default, types with any name)."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for component in components:
        entity_type = component.entity_type
        if not entity_type:
            raise InvalidRequestError("Invalid empty entity type.")
        if entity_type in exact or entity_type in typed:
            raise InvalidRequestError(
                f"Entity type {entity_type} cannot appear more than once in the filter."
            )
        if entity_type not in (USER, CLIENT_ID, IP):
            raise UnsupportedEntityTypeError(f"Unsupported entity type {entity_type}")
        match component.match_type:
            case QuotaMatchType.EXACT if component.match is not None:
                exact[entity_type] = component.match
            case QuotaMatchType.DEFAULT if component.match is None:
                exact[entity_type] = None
            case QuotaMatchType.SPECIFIED if component.match is None:
                typed.add(entity_type)
            case _:
                raise InvalidRequestError(
                    f"Unexpected match type {component.match_type} with match "
                    f"{component.match!r} for entity type {entity_type}"
                )
    kinds = set(exact) | typed
    if IP in kinds and kinds & {USER, CLIENT_ID}:
        raise InvalidRequestError(
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component."
        )
    return exact, typed


def describe_client_quotas(
    image: MetadataImage, components: Sequence[ComponentData], strict: bool
) -> tuple[DescribeClientQuotasEntry, ...]:
    """The entities matching a KIP-546 filter, as KRaft's ``describeClientQuotas``.

    SPECIFIED ("any name") tests only that the entity has the type, so it also
    matches the default entity, as KRaft does. Strict requires the entity to
    have exactly the filtered types; no components and not strict is every entity.

    Raises:
        InvalidRequestError: empty or repeated type, a Match that does not fit
            its MatchType, or ip combined with user / client-id.
        UnsupportedEntityTypeError: an entity type other than user, client-id, ip.
    """
    exact, typed = _parse_filter(components)
    found = []
    for entity, values in image.client_quotas.items():
        names = dict(entity)
        if strict and len(names) != len(exact) + len(typed):
            continue
        if any(t not in names or names[t] != n for t, n in exact.items()):
            continue
        if any(t not in names for t in typed):
            continue
        found.append(
            DescribeClientQuotasEntry(
                entity=tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity),
                values=tuple(QuotaValue(key=k, value=v) for k, v in sorted(values.items())),
            )
        )
    return tuple(found)


def with_kafka_key_names(
    entries: tuple[DescribeClientQuotasEntry, ...],
) -> tuple[DescribeClientQuotasEntry, ...]:
    """The entries with each key under Kafka's name (``push_byte_rate`` as ``producer_byte_rate``).

    Kafka's ``ConfigCommand`` checks every ``--delete-config`` key against what
    DescribeClientQuotas described and refuses a key outside Kafka's
    ``QuotaConfig`` names before it sends anything, so only Kafka's name makes
    a quota deletable with ``kafka-configs.sh``.
    """
    return tuple(
        DescribeClientQuotasEntry(
            entity=entry.entity,
            values=tuple(
                sorted(
                    (
                        QuotaValue(key=KAFKA_KEY_NAMES.get(v.key, v.key), value=v.value)
                        for v in entry.values
                    ),
                    key=lambda v: v.key,
                )
            ),
        )
        for entry in entries
    )
