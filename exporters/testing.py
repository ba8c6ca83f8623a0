"""Test doubles for code that drives exporters (the host, plugins' own tests).

Shipped in the package, as OpenTelemetry ships ``InMemoryMetricReader`` and
structlog ships ``structlog.testing``, so plugin authors and the server's
tests share one set of well-behaved fakes.

Each double is an ``ExporterFactory`` too: it takes an optional ``config``
mapping (the ``[exporters.NAME.options]`` table) whose keys mirror its keyword
arguments, so it can be registered with ``exporters.registry.register`` and
configured like a real plugin. The doubles are strict about the lifecycle the
host promises (``start`` before ``export``, nothing after ``close``) and
raise ``RuntimeError`` when it is broken, so host bugs fail tests loudly.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from exporters.api import PermanentExportError, TransientExportError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from exporters.api import LoggedPush

__all__ = ["FailingExporter", "InMemoryExporter", "SlowExporter"]


def _options(config: Mapping[str, Any] | None, allowed: frozenset[str]) -> Mapping[str, Any]:
    config = config or {}
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise TypeError(f"unknown option {unknown[0]!r} (known: {', '.join(sorted(allowed))})")
    return config


class InMemoryExporter:
    """Records every batch it is given, plus lifecycle flags.

    Attributes:
        batches: Each accepted batch, copied to a tuple (the host may reuse
            its sequence after ``export`` returns).
        started, closed: Whether ``start`` / ``close`` were called.
        flush_count, close_count: How often ``flush`` / ``close`` were called.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, /) -> None:
        _options(config, frozenset())
        self.batches: list[tuple[LoggedPush, ...]] = []
        self.started = False
        self.closed = False
        self.flush_count = 0
        self.close_count = 0

    @property
    def flushed(self) -> bool:
        """Whether ``flush`` was called at least once."""
        return self.flush_count > 0

    @property
    def pushes(self) -> list[LoggedPush]:
        """Every accepted push, in the order exported."""
        return [push for batch in self.batches for push in batch]

    @property
    def offsets(self) -> list[int]:
        """``push.offset`` of every accepted push, in order (duplicates kept)."""
        return [push.offset for batch in self.batches for push in batch]

    async def start(self) -> None:
        self._check_open()
        self.started = True

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        self._check_open()
        if not self.started:
            raise RuntimeError("export() before start()")
        await self._before_accept(batch)
        self.batches.append(tuple(batch))

    async def flush(self) -> None:
        self.flush_count += 1

    async def close(self) -> None:
        self.close_count += 1
        self.closed = True

    async def _before_accept(self, batch: Sequence[LoggedPush]) -> None:
        """Hook for the subclasses: raise to refuse the batch, or delay it."""

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__} used after close()")


class FailingExporter(InMemoryExporter):
    """Fails the first ``failures`` export calls, then behaves like ``InMemoryExporter``.

    ``failures=None`` fails forever. ``permanent`` selects
    ``PermanentExportError`` instead of ``TransientExportError``. Config keys:
    ``failures``, ``permanent``.

    Attributes:
        attempts: Every ``export`` call, failed or not.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        /,
        *,
        failures: int | None = 1,
        permanent: bool = False,
    ) -> None:
        options = _options(config, frozenset({"failures", "permanent"}))
        super().__init__()
        failures = options.get("failures", failures)
        permanent = options.get("permanent", permanent)
        if failures is not None and (not isinstance(failures, int) or failures < 0):
            raise ValueError(f"option 'failures' must be an int >= 0 or None: {failures!r}")
        if not isinstance(permanent, bool):
            raise ValueError(f"option 'permanent' must be a bool: {permanent!r}")
        self.failures = failures
        self.permanent = permanent
        self.attempts = 0

    async def _before_accept(self, batch: Sequence[LoggedPush]) -> None:
        self.attempts += 1
        if self.failures is None or self.attempts <= self.failures:
            error = PermanentExportError if self.permanent else TransientExportError
            raise error(f"{type(self).__name__}: attempt {self.attempts} fails on purpose")


class SlowExporter(InMemoryExporter):
    """Sleeps ``delay_s`` (on the event loop, without blocking it) in each ``export``.

    For timeout, backpressure and shutdown-deadline tests. Config key: ``delay_s``.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, /, *, delay_s: float = 0.1) -> None:
        options = _options(config, frozenset({"delay_s"}))
        super().__init__()
        delay_s = options.get("delay_s", delay_s)
        if isinstance(delay_s, bool) or not isinstance(delay_s, int | float) or delay_s < 0:
            raise ValueError(f"option 'delay_s' must be a number >= 0: {delay_s!r}")
        self.delay_s = float(delay_s)

    async def _before_accept(self, batch: Sequence[LoggedPush]) -> None:
        await asyncio.sleep(self.delay_s)
