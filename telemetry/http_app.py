"""The HTTP front door (aiohttp): health, Prometheus metrics, and pushes forwarded by brokers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from telemetry.http_forward import FORWARD_PATH

if TYPE_CHECKING:
    from collections.abc import Callable

    from prometheus_client import CollectorRegistry

    from telemetry.http_forward import ForwardHandler


def create_app(
    registry: CollectorRegistry,
    health: Callable[[], dict[str, object]],
    forward: ForwardHandler | None = None,
) -> web.Application:
    """``GET /healthz`` (200 while healthy, 503 otherwise), ``GET /metrics``, the forward route."""
    app = web.Application()

    async def healthz(request: web.Request) -> web.Response:
        status = health()
        return web.json_response(status, status=200 if status.get("ok") else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    if forward is not None:
        app.router.add_post(FORWARD_PATH, forward.handle)
    return app
