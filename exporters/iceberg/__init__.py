"""The Iceberg landing: every acknowledged data point in an Apache Iceberg table, exactly once.

``IcebergExporter`` is the ``iceberg`` entry point in ``kip714.exporters`` and
the default landing of ``kip714 serve``; ``docs/landing.md`` describes the
catalog, the schema, the exactly-once argument and maintenance.
"""

from __future__ import annotations

from exporters.iceberg.exporter import IcebergExporter, IcebergStats

__all__ = ["IcebergExporter", "IcebergStats"]
