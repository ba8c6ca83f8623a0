"""The Parquet landing: every acknowledged data point in Parquet exactly once.

``ParquetExporter`` is the ``parquet`` entry point in ``kip714.exporters``;
``docs/parquet.md`` describes the layout, the publication protocol and the
options.
"""

from __future__ import annotations

from exporters.parquet.exporter import ParquetExporter, ParquetStats

__all__ = ["ParquetExporter", "ParquetStats"]
