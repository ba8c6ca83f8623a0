"""The HTTP front door (aiohttp): health and Prometheus metrics.

The composition root adds the ingestion routes (``telemetry.http``:
OTLP/HTTP and KIP-714 over HTTP) to this app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

if TYPE_CHECKING:
    from collections.abc import Callable

    from prometheus_client import CollectorRegistry


def create_app(
    registry: CollectorRegistry, health: Callable[[], dict[str, object]]
) -> web.Application:
    """``GET /healthz`` (200 while healthy, 503 otherwise) and ``GET /metrics``."""
    app = web.Application()

    async def healthz(request: web.Request) -> web.Response:
        status = health()
        return web.json_response(status, status=200 if status.get("ok") else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    return app
