"""Every request a bound refused, by door and by the bound that refused it.

Each bound of design invariant 10 (a request's decoded size, its resources,
a frame's wait, an unauthenticated share of the pool, ...) counts here when
it refuses, so an operator sees on ``/metrics``
(``kip714_requests_refused_total{door,reason}``) which bound bites and on
which door, the same name whatever door refused.
"""

from __future__ import annotations

import logging
import time
from typing import Final

__all__ = ["LOG_INTERVAL_S", "RateLimitedLog", "Refusals"]

#: A refusal of one kind from one address is logged at most once per interval.
LOG_INTERVAL_S: Final = 60.0
_MAX_LOGGED_KEYS: Final = 4096


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


class RateLimitedLog:
    """One line per address, kind of refusal and minute; the table of addresses is bounded.

    A flood of refusals (connections, timeouts, failed SASL attempts) must not
    flood the log as well: the first of each kind from an address is logged,
    the rest within :data:`LOG_INTERVAL_S` are counted elsewhere (``/metrics``)
    only. When more than 4,096 (address, kind) pairs were logged within the
    interval, new ones are not logged until old ones age out.
    """

    def __init__(
        self,
        logger: logging.Logger,
        level: int = logging.WARNING,
        interval_s: float = LOG_INTERVAL_S,
    ) -> None:
        self._logger = logger
        self._level = level
        self._interval_s = interval_s
        self._last: dict[tuple[str, str], float] = {}
        #: Lines not written because one like them was, within the interval.
        self.suppressed = 0

    def __call__(self, address: str, what: str, message: str, *args: object) -> None:
        now = time.monotonic()
        key = (address, what)
        last = self._last.get(key)
        interval = self._interval_s
        if last is not None and now - last < interval:
            self.suppressed += 1
            return
        if len(self._last) >= _MAX_LOGGED_KEYS:
            self._last = {k: t for k, t in self._last.items() if now - t < interval}
            if len(self._last) >= _MAX_LOGGED_KEYS:
                self.suppressed += 1
                return
        self._last[key] = now
        self._logger.log(self._level, message, *args)
