"""What the unauthenticated HTTP routes may say: readiness reasons, and who may read ``/metrics``.

``/readyz`` and ``/healthz`` answer anyone: a landing worker's traceback
names files, versions and data an outsider has no use for, so they give a
reason's first line and the log gets the whole text. ``[http] metrics_auth
= "admin"`` puts ``/metrics`` behind what the HTTP admin API needs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from aiohttp import web

if TYPE_CHECKING:
    from collections.abc import Callable

    from telemetry.admin.authorizer import Authorizer
    from telemetry.enforcement.refusals import Refusals

_log = logging.getLogger("telemetry.server.bootstrap")

#: Distinct multi-line reasons remembered as logged (then forgotten, and logged again).
_LOGGED_REASONS: Final = 64
_TRACEBACK: Final = "Traceback (most recent call last):"


class PublicReasons:
    """Turns readiness reasons into their first lines, logging each longer one once."""

    def __init__(self) -> None:
        self._logged: set[str] = set()

    def __call__(self, reasons: list[str]) -> list[str]:
        return [self._first_line(reason) for reason in reasons]

    def _first_line(self, reason: str) -> str:
        first, newline, _ = reason.partition("\n")
        if not newline:
            return reason
        if reason not in self._logged:
            if len(self._logged) >= _LOGGED_REASONS:
                self._logged.clear()
            self._logged.add(reason)
            _log.error("not ready: %s", reason)
        first = first.rstrip().removesuffix(_TRACEBACK).rstrip(" :")
        return f"{first} (details in the server log)"


def metrics_guard(
    metrics_auth: str, authorizer: Authorizer, refusals: Refusals
) -> Callable[[web.Request], web.Response | None] | None:
    """``/metrics``'s guard: none for ``"none"``; for ``"admin"``, the HTTP admin API's rules."""
    if metrics_auth != "admin":
        return None

    def refusal_of(request: web.Request) -> web.Response | None:
        refusal = authorizer.http_admin_request_refusal(request)
        if refusal is None:
            return None
        refusals.count("metrics", "metrics_auth")
        headers = {"WWW-Authenticate": 'Bearer realm="kip714"'} if refusal.status == 401 else None
        return web.Response(
            status=refusal.status,
            text=f"{refusal.status} /metrics ([http] metrics_auth = admin): {refusal.message}",
            headers=headers,
        )

    return refusal_of
