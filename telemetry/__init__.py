"""The kip714 service: KIP-714 ingestion, the Kafka and HTTP front doors, the ingest log."""

from __future__ import annotations

__all__: list[str] = []
