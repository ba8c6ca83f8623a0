"""The ingestion routes, added to the HTTP app by the composition root."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from telemetry.http.kip714 import GET_ROUTE, PUSH_ROUTE, GetSubscriptionsHandler, PushHandler
from telemetry.http.otlp import ROUTE as OTLP_ROUTE
from telemetry.http.otlp import OtlpMetricsHandler

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aiohttp import web

    from telemetry.http.authentication import HttpAuthenticator
    from telemetry.http.ingest import HttpIngest

__all__ = ["RUNNER_OPTIONS", "add_ingest_routes"]

#: How the app is served (``web.AppRunner(app, **RUNNER_OPTIONS)``): the routes
#: decode ``Content-Encoding`` themselves, with a bound on the output; and the
#: rest of a body refused early (413) is read for at most a second after the
#: answer — aiohttp's lingering close waits 10 s by default, and a stopping
#: server would wait that long for a client still sending.
RUNNER_OPTIONS: Final[Mapping[str, Any]] = {
    "access_log": None,
    "auto_decompress": False,
    "lingering_time": 1.0,
}


def add_ingest_routes(
    app: web.Application, ingest: HttpIngest, authenticator: HttpAuthenticator | None = None
) -> None:
    """``POST /v1/metrics``, ``/v1/telemetry/subscriptions`` and ``/v1/telemetry/push``.

    Each behind ``authenticator`` when given (every request is anonymous
    otherwise). Serve the app with :data:`RUNNER_OPTIONS`.
    """
    otlp = OtlpMetricsHandler(ingest)

    async def close(app: web.Application) -> None:
        otlp.close()

    app.on_cleanup.append(close)
    routes = {
        OTLP_ROUTE: (otlp.handle, "otlp"),
        GET_ROUTE: (GetSubscriptionsHandler(ingest).handle, "http"),
        PUSH_ROUTE: (PushHandler(ingest).handle, "http"),
    }
    for path, (handler, door) in routes.items():
        app.router.add_post(path, authenticator.guard(handler, door) if authenticator else handler)
