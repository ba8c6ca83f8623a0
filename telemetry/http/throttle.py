"""Where a quota decision plugs into the HTTP ingestion routes, and how it is answered.

Each route asks one :class:`RequestThrottle` before doing any work; a
positive answer refuses the request with HTTP 429 and ``Retry-After``. The
server passes :func:`no_throttle` until quota enforcement is wired in.

``Retry-After`` is in whole seconds (RFC 9110 §10.2.3), rounded up so a
client never retries early. For OTLP it is also capped below 10 s: the
OpenTelemetry SDKs give a request 10 s in total and drop it rather than
wait past that.
"""

from __future__ import annotations

import math
from typing import Final, Protocol

__all__ = ["OTLP_MAX_RETRY_AFTER_S", "RequestThrottle", "no_throttle", "retry_after_s"]

#: The longest ``Retry-After`` an OTLP response carries.
OTLP_MAX_RETRY_AFTER_S: Final = 9


class RequestThrottle(Protocol):
    """The throttle time owed by an entity for a request of ``request_bytes``; 0 to go on."""

    def __call__(
        self, *, principal: str, client_id: str | None, request_bytes: int, now_ms: int
    ) -> int: ...


def no_throttle(*, principal: str, client_id: str | None, request_bytes: int, now_ms: int) -> int:
    return 0


def retry_after_s(throttle_time_ms: int, cap_s: int | None = None) -> int:
    """``ceil(ms / 1000)``, at least 1, and at most ``cap_s`` when given."""
    seconds = max(1, math.ceil(throttle_time_ms / 1000))
    return seconds if cap_s is None else min(seconds, cap_s)
