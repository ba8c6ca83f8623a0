"""The HTTP front door (aiohttp): liveness, readiness, Prometheus metrics, forwarded pushes.

The composition root adds the ingestion routes (``telemetry.http``:
OTLP/HTTP and KIP-714 over HTTP) to this app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from telemetry.http.forward import FORWARD_PATH

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from telemetry.http.forward import ForwardHandler


def create_app(
    render_metrics: Callable[[str | None], Awaitable[tuple[bytes, str]]],
    health: Callable[[], dict[str, object]],
    readiness: Callable[[], list[str]] | None = None,
    forward: ForwardHandler | None = None,
    exporters: Callable[[], dict[str, str]] | None = None,
    metrics_guard: Callable[[web.Request], web.Response | None] | None = None,
) -> web.Application:
    """``GET /healthz`` (liveness), ``/readyz`` (readiness), ``/metrics``, the forward route.

    ``/healthz`` answers 200 while the process runs, with the details in its
    JSON; ``/readyz`` answers 503 with the reasons while the server cannot
    take or land pushes (see ``Server.readiness``), 200 otherwise; its
    ``exporters`` field maps every running exporter's name to its type, so
    a probe can tell that the landing runs at all. ``/metrics`` is served
    once ``metrics_guard`` (when given) lets the request through;
    ``render_metrics`` keeps the text's rendering off the event loop.
    """
    app = web.Application()

    async def metrics(request: web.Request) -> web.Response:
        if metrics_guard is not None:
            refusal = metrics_guard(request)
            if refusal is not None:
                return refusal
        body, content_type = await render_metrics(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response(health())

    async def readyz(request: web.Request) -> web.Response:
        reasons = readiness() if readiness is not None else []
        body: dict[str, object] = {"ready": not reasons, "reasons": reasons}
        if exporters is not None:
            body["exporters"] = exporters()
        return web.json_response(body, status=503 if reasons else 200)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    if forward is not None:
        app.router.add_post(FORWARD_PATH, forward.handle)
    return app
