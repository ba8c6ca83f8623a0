"""The in-memory image: the current state the records add up to.

As KRaft's ``ConfigurationsImage`` / ``ClientQuotasImage`` / ``ScramImage``,
rebuilt at open by replaying the snapshot and the log, and replaced (never
mutated) on every append, so a reader holding an image sees one consistent
state while the admin plane changes the next one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from telemetry.metastore.records import (
    ClientQuotaRecord,
    ConfigRecord,
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from telemetry.security.scram import ScramCredential

CLIENT_METRICS_RESOURCE: Final = 16
"""``ConfigResource.Type.CLIENT_METRICS``."""

QuotaEntity = tuple[tuple[str, str | None], ...]
"""A quota entity as ``((type, name or None for default), ...)`` sorted by type."""


def _frozen(mapping: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(mapping)


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """Configs per resource, quotas per entity, SCRAM credentials per (user, mechanism id)."""

    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    scram_credentials: Mapping[tuple[str, int], ScramCredential] = field(
        default_factory=lambda: MappingProxyType({})
    )

    @property
    def client_metrics(self) -> Mapping[str, Mapping[str, str]]:
        """Dynamic client-metrics subscriptions: name → the keys set on it."""
        return MappingProxyType(
            {
                name: keys
                for (resource_type, name), keys in self.configs.items()
                if resource_type == CLIENT_METRICS_RESOURCE
            }
        )

    @property
    def ip_quotas(self) -> Mapping[str | None, Mapping[str, float]]:
        """Quotas of ``ip`` entities: address (None = default) → keys."""
        return MappingProxyType(
            {
                entity[0][1]: values
                for entity, values in self.client_quotas.items()
                if len(entity) == 1 and entity[0][0] == "ip"
            }
        )

    def apply(self, records: Iterable[MetadataRecord]) -> MetadataImage:
        """A new image with ``records`` replayed in order, as KRaft's replay does."""
        configs = {resource: dict(keys) for resource, keys in self.configs.items()}
        quotas = {entity: dict(values) for entity, values in self.client_quotas.items()}
        scram = dict(self.scram_credentials)
        for record in records:
            match record:
                case ConfigRecord():
                    resource = (record.resource_type, record.resource_name)
                    keys = configs.setdefault(resource, {})
                    if record.value is None:
                        keys.pop(record.name, None)
                    else:
                        keys[record.name] = record.value
                    if not keys:  # every key deleted: the resource is gone
                        del configs[resource]
                case ClientQuotaRecord():
                    values = quotas.setdefault(record.entity, {})
                    if record.remove:
                        values.pop(record.key, None)
                    else:
                        values[record.key] = record.value
                    if not values:
                        del quotas[record.entity]
                case UserScramCredentialRecord():
                    scram[(record.name, record.mechanism)] = ScramCredential(
                        salt=record.salt,
                        stored_key=record.stored_key,
                        server_key=record.server_key,
                        iterations=record.iterations,
                    )
                case RemoveUserScramCredentialRecord():
                    scram.pop((record.name, record.mechanism), None)
        return MetadataImage(
            configs=MappingProxyType(
                {resource: _frozen(keys) for resource, keys in configs.items()}
            ),
            client_quotas=MappingProxyType(
                {entity: MappingProxyType(values) for entity, values in quotas.items()}
            ),
            scram_credentials=MappingProxyType(scram),
        )

    def to_records(self) -> tuple[MetadataRecord, ...]:
        """Records that rebuild this image from empty: a snapshot's content."""
        records: list[MetadataRecord] = [
            ConfigRecord(resource_type=resource_type, resource_name=name, name=key, value=value)
            for (resource_type, name), keys in sorted(self.configs.items())
            for key, value in sorted(keys.items())
        ]
        records.extend(
            ClientQuotaRecord(entity=entity, key=key, value=value)
            for entity, values in sorted(self.client_quotas.items(), key=lambda e: repr(e[0]))
            for key, value in sorted(values.items())
        )
        records.extend(
            scram_record(name, mechanism, credential)
            for (name, mechanism), credential in sorted(self.scram_credentials.items())
        )
        return tuple(records)


def scram_record(
    name: str, mechanism: int, credential: ScramCredential
) -> UserScramCredentialRecord:
    """The record that stores ``credential`` (a snapshot's, or a topic message's)."""
    return UserScramCredentialRecord(
        name=name,
        mechanism=mechanism,
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=credential.iterations,
    )
