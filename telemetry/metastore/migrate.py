"""Copy a node's local metadata store into the shared Kafka topic (``kip714 meta migrate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from telemetry.metastore.entities import entity_of
from telemetry.metastore.store import META_DIR, MetadataStore, MetadataStoreError

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.metastore.backend import StateCheck
    from telemetry.metastore.settings import MetaSettings


class MigrationRefusedError(MetadataStoreError):
    """Nothing was copied: the source is missing or the topic already holds records."""


@dataclass(frozen=True, slots=True)
class Migration:
    records: int
    entities: int
    topic_records_before: int
    next_offset: int


def migrate_to_kafka(
    data_dir: Path, settings: MetaSettings, *, force: bool, check: StateCheck | None = None
) -> Migration:
    """Write every entity of ``<data_dir>/meta`` to the topic, one message per entity.

    ``check`` (the admin plane's rules) is run on both stores as they are
    read: what it refuses is skipped and not copied.

    The topic is read to its end first. A topic that already holds records
    is refused unless ``force``; then the local keys are written over the
    topic's key by key (keys only the topic has stay). The caller holds the
    data directory's lock, so no server changes the local store meanwhile.

    Raises:
        MigrationRefusedError: no local store, or a non-empty topic without ``force``.
        MetadataStoreError: the local store or the topic cannot be read or written.
    """
    from telemetry.metastore.kafka_log import KafkaMetadataLog  # noqa: PLC0415

    if not (data_dir / META_DIR).is_dir():
        raise MigrationRefusedError(f"no local metadata store at {data_dir / META_DIR}")
    with MetadataStore.open(data_dir, check=check) as local:
        records = local.image.to_records()
    log = KafkaMetadataLog.open(settings, check)
    try:
        existing = len(log.image.to_records())
        if existing and not force:
            raise MigrationRefusedError(
                f"{log.location} already holds {existing} records; --force writes the "
                "local values over them key by key"
            )
        log.append(records)
        return Migration(
            records=len(records),
            entities=len({entity_of(record) for record in records}),
            topic_records_before=existing,
            next_offset=log.next_offset,
        )
    finally:
        log.close()
