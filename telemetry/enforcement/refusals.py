"""Every request a bound refused, by door and by the bound that refused it.

Each bound of design invariant 10 (a request's decoded size, its resources,
a frame's wait, an unauthenticated share of the pool, ...) counts here when
it refuses, so an operator sees on ``/metrics``
(``kip714_requests_refused_total{door,reason}``) which bound bites and on
which door, the same name whatever door refused.
"""

from __future__ import annotations

__all__ = ["Refusals"]


class Refusals:
    """Counts of refused requests keyed by ``(door, reason)``.

    ``door`` names the front door (``kafka``, ``otlp``, ``http``, ``forward``,
    ``admin``, ``metrics``); ``reason`` is the configuration key of the bound
    (``max_resources_per_request``, ``partial_frame_timeout_ms``, ...), so the
    label says what to raise.
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def count(self, door: str, reason: str, requests: int = 1) -> None:
        key = (door, reason)
        self.counts[key] = self.counts.get(key, 0) + requests
