"""Exporter plugins: the interface kip714 feeds logged pushes through, and the built-ins.

``exporters.api`` is the stable, stdlib-only contract third-party plugins build
on; this package never imports ``telemetry`` (the server depends on it, not the
other way round).
"""

from __future__ import annotations

from exporters.api import (
    BufferingExporter,
    Exporter,
    ExporterFactory,
    ExportError,
    LogBoundExporter,
    LoggedPush,
    PartitionedExporter,
    PermanentExportError,
    TransientExportError,
)

__all__ = [
    "BufferingExporter",
    "ExportError",
    "Exporter",
    "ExporterFactory",
    "LogBoundExporter",
    "LoggedPush",
    "PartitionedExporter",
    "PermanentExportError",
    "TransientExportError",
]
