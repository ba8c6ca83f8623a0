"""Ingestion over HTTP: OTLP/HTTP metrics and KIP-714's two RPCs, into the ingest log.

Depends on the manager, the ingest log and the wire-independent parts of
``telemetry``; the composition root adds the routes to the aiohttp app.
"""

from __future__ import annotations

from telemetry.http.ingest import HttpIngest, HttpIngestStats
from telemetry.http.routes import add_ingest_routes
from telemetry.http.throttle import HttpQuotas

__all__ = ["HttpIngest", "HttpIngestStats", "HttpQuotas", "add_ingest_routes"]
