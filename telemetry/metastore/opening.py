"""Open the store ``[meta] store`` names: ``<data_dir>/meta/`` or the shared Kafka topic."""

from __future__ import annotations

from typing import TYPE_CHECKING

from telemetry.metastore.store import META_DIR, MetadataStore

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.metastore.backend import MetadataBackend, StateCheck
    from telemetry.metastore.settings import MetaSettings


def store_location(settings: MetaSettings, data_dir: Path) -> str:
    """Where the store lives, for a one-line error before it is open."""
    if settings.store == "kafka":
        return f"topic {settings.topic} at {settings.bootstrap_servers}"
    return str(data_dir / META_DIR)


def open_store(
    settings: MetaSettings, data_dir: Path, check: StateCheck | None = None
) -> MetadataBackend:
    """Blocking: a Kafka store reads its topic to the end first (``startup_timeout_s``).

    ``check``: the admin plane's rules, run on every record read back; what
    they refuse is skipped and counted, never a reason to refuse the start.

    Raises:
        MetadataStoreError, OSError: the store cannot be opened.
    """
    if settings.store == "kafka":
        # confluent-kafka loads only for a node that uses the topic.
        from telemetry.metastore.kafka_log import KafkaMetadataLog  # noqa: PLC0415

        return KafkaMetadataLog.open(settings, check)
    return MetadataStore.open(data_dir, check=check)
