"""The ingestion routes, added to the HTTP app by the composition root."""

from __future__ import annotations

from typing import TYPE_CHECKING

from telemetry.http.kip714 import GET_ROUTE, PUSH_ROUTE, GetSubscriptionsHandler, PushHandler
from telemetry.http.otlp import ROUTE as OTLP_ROUTE
from telemetry.http.otlp import OtlpMetricsHandler

if TYPE_CHECKING:
    from aiohttp import web

    from telemetry.http.ingest import HttpIngest

__all__ = ["add_ingest_routes"]


def add_ingest_routes(app: web.Application, ingest: HttpIngest) -> None:
    """``POST /v1/metrics``, ``/v1/telemetry/subscriptions`` and ``/v1/telemetry/push``.

    Serve the app with ``auto_decompress=False`` (``web.AppRunner(app,
    auto_decompress=False)``): the routes decode ``Content-Encoding``
    themselves, with a bound on the output.
    """
    otlp = OtlpMetricsHandler(ingest)

    async def close(app: web.Application) -> None:
        otlp.close()

    app.on_cleanup.append(close)
    app.router.add_post(OTLP_ROUTE, otlp.handle)
    app.router.add_post(GET_ROUTE, GetSubscriptionsHandler(ingest).handle)
    app.router.add_post(PUSH_ROUTE, PushHandler(ingest).handle)
