"""The ``prometheus`` exporter: every client series' latest value for Prometheus to scrape."""

from __future__ import annotations

from exporters.prometheus.exporter import PrometheusExporter
from exporters.prometheus.names import label_name, metric_name
from exporters.prometheus.series import IDENTITY_LABELS, SeriesStats

__all__ = ["IDENTITY_LABELS", "PrometheusExporter", "SeriesStats", "label_name", "metric_name"]
