"""The ``otlp`` exporter: every logged push forwarded to an OTLP/HTTP metrics endpoint."""

from __future__ import annotations

from exporters.otlp.encode import IDENTITY_ATTRIBUTES
from exporters.otlp.exporter import OtlpExporter, OtlpStats
from exporters.otlp.settings import OtlpSettings

__all__ = ["IDENTITY_ATTRIBUTES", "OtlpExporter", "OtlpSettings", "OtlpStats"]
