"""The ``otlp`` exporter: pushes batched into OTLP/HTTP requests, committed only once delivered.

It is a ``BufferingExporter``: ``export`` encodes the pushes and queues
them, a dispatcher groups queued pushes into requests (up to
``batch_max_bytes``, or whatever waited ``batch_timeout_ms``), and up to
``max_in_flight`` requests travel at once. ``durable_offset`` is the first
offset not yet answered with a 2xx (or refused as bad data), so the host
never commits past a push the backend has not taken: delivery is at least
once, and a restart resends what was not acknowledged.

Memory is bounded by ``max_pending_bytes`` of encoded pushes, waiting or in
flight. When it is full ``export`` waits; if the backend is failing
meanwhile, ``export`` raises ``TransientExportError`` instead, so the
host counts the failure, backs off and, after a few attempts, reports the
exporter as failing on ``/readyz``, while the log keeps every push. A push
offered again (the host retries a batch) is recognised by its offset and
not queued twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, final

import aiohttp

from exporters.api import TransientExportError
from exporters.otlp.delivery import Delivered, Delivery
from exporters.otlp.encode import encode_push
from exporters.otlp.settings import OtlpSettings

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from exporters.api import LoggedPush

__all__ = ["OtlpExporter", "OtlpStats"]

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class OtlpStats(Delivered):
    """Running totals; ``failed_attempts`` counts every failed POST, retried or not."""

    undecodable_pushes: int = 0
    failed_attempts: int = 0


@dataclass(slots=True)
class _Queued:
    offset: int
    body: bytes  # empty when the push had nothing to send (undecodable or no resources)
    queued_at: float = 0.0  # time.monotonic() when queued


@dataclass(slots=True)
class _Request:
    first_offset: int
    bodies: list[bytes] = field(default_factory=list)
    size: int = 0


@final
class OtlpExporter:
    """Forwards logged pushes to ``endpoint`` as OTLP/HTTP protobuf (see the module docstring).

    Raises (at construction):
        TypeError: An unknown option, or ``endpoint`` missing.
        ValueError: An option with an invalid value.
    """

    def __init__(self, config: Mapping[str, Any], /) -> None:
        self.settings = OtlpSettings.from_options(config)
        self.stats = OtlpStats()
        self._waiting: deque[_Queued] = deque()
        self._waiting_bytes = 0
        self._held_bytes = 0
        self._in_flight: dict[int, _Request] = {}
        self._exported_end = 0
        self._flushing = 0
        self._failing: str | None = None
        self._changed = asyncio.Condition()
        self._slots = asyncio.Semaphore(self.settings.max_in_flight)
        self._session: aiohttp.ClientSession | None = None
        self._delivery: Delivery | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._senders: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def failing(self) -> str | None:
        """The last failed attempt while the backend is not taking requests, else ``None``."""
        return self._failing

    def durable_offset(self) -> int:
        """The first offset the backend has not yet answered for; all before it are delivered."""
        firsts = [request.first_offset for request in self._in_flight.values()]
        if self._waiting:
            firsts.append(self._waiting[0].offset)
        return min(firsts) if firsts else self._exported_end

    async def start(self) -> None:
        if self._closed:
            raise RuntimeError("otlp exporter is closed")
        if self._session is not None:
            return
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout)
        self._delivery = Delivery(self.settings, self._session, self._attempted)
        self._dispatcher = asyncio.create_task(self._dispatch(), name="otlp-dispatcher")
        self._dispatcher.add_done_callback(self._task_done)

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        """Queue ``batch`` for delivery; waits while ``max_pending_bytes`` are held.

        Raises:
            TransientExportError: No room, and the backend is failing.
        """
        if self._session is None:
            raise RuntimeError("otlp exporter used before start() or after close()")
        fresh = [push for push in batch if push.offset >= self._exported_end]
        if not fresh:
            return
        bodies = await asyncio.to_thread(_encode_all, fresh)
        for push, body in zip(fresh, bodies, strict=True):
            if push.offset < self._exported_end:
                continue  # queued by an earlier, interrupted offer of this batch
            if body is None:
                self.stats.undecodable_pushes += 1
                _log.warning("otlp exporter: push at offset %d is not OTLP, skipped", push.offset)
            await self._enqueue(_Queued(push.offset, body or b""))

    async def flush(self) -> None:
        """Wait until every queued push is answered for (delivered or refused as bad data)."""
        if self._session is None:
            return
        async with self._changed:
            self._flushing += 1
            self._changed.notify_all()
            try:
                await self._changed.wait_for(lambda: not self._waiting and not self._in_flight)
            finally:
                self._flushing -= 1

    async def close(self) -> None:
        """Deliver what is queued (within ``timeout_s``), then stop; idempotent.

        A backend that is failing gets no such grace: the host's own flush
        already waited for it, and what is undelivered stays in the log.
        """
        if self._closed:
            return
        self._closed = True
        session = self._session
        if session is None:
            return
        try:
            if self._failing is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.flush(), self.settings.timeout_s)
            undelivered = len(self._waiting) + sum(len(r.bodies) for r in self._in_flight.values())
            if undelivered:
                _log.warning(
                    "otlp exporter closed with %d push(es) undelivered; they stay in the log",
                    undelivered,
                )
        finally:
            self._session = None
            tasks = [*self._senders, *([self._dispatcher] if self._dispatcher else [])]
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
            await session.close()

    # -- internals ----------------------------------------------------------------------------

    async def _enqueue(self, queued: _Queued) -> None:
        size = len(queued.body)
        async with self._changed:
            while self._held_bytes and self._held_bytes + size > self.settings.max_pending_bytes:
                if self._failing is not None:
                    raise TransientExportError(
                        f"{self._held_bytes} bytes wait for a failing backend: {self._failing}"
                    )
                await self._changed.wait()
            queued.queued_at = time.monotonic()
            self._waiting.append(queued)
            self._waiting_bytes += size
            self._held_bytes += size
            self._exported_end = queued.offset + 1
            self._changed.notify_all()

    async def _dispatch(self) -> None:
        while True:
            await self._slots.acquire()
            try:
                request = await self._next_request()
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.create_task(self._send(request), name="otlp-request")
            self._senders.add(task)
            task.add_done_callback(self._senders.discard)
            task.add_done_callback(self._task_done)

    async def _next_request(self) -> _Request:
        """Wait for a full request, an old enough push, or a flush; take one request's pushes."""
        limit = self.settings.batch_max_bytes
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self._waiting))
            while self._waiting_bytes < limit and not self._flushing:
                oldest = self._waiting[0].queued_at
                left = oldest + self.settings.batch_timeout_ms / 1000 - time.monotonic()
                if left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)
            request = _Request(self._waiting[0].offset)
            while self._waiting and (
                not request.bodies or request.size + len(self._waiting[0].body) <= limit
            ):
                queued = self._waiting.popleft()
                request.bodies.append(queued.body)
                request.size += len(queued.body)
            self._waiting_bytes -= request.size
            self._in_flight[request.first_offset] = request
            return request

    async def _send(self, request: _Request) -> None:
        try:
            assert self._delivery is not None
            outcome = await self._delivery.deliver(request.bodies)
        finally:
            self._slots.release()
        async with self._changed:
            del self._in_flight[request.first_offset]
            self._held_bytes -= request.size
            self.stats.add(outcome)
            self._changed.notify_all()

    async def _attempted(self, problem: str | None) -> None:
        """Delivery's report of each attempt: ``None`` on an answer, else what went wrong."""
        if problem is None:
            if self._failing is not None:
                _log.info("otlp exporter: %s takes requests again", self.settings.endpoint)
            self._failing = None
            return
        self.stats.failed_attempts += 1
        if self._failing is None:
            _log.error("otlp exporter: %s; retrying with backoff", problem)
        self._failing = problem
        async with self._changed:
            self._changed.notify_all()  # an export waiting for room now raises

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._failing = f"{task.get_name()} task died: {error!r}"
            _log.error("otlp exporter: %s", self._failing, exc_info=error)


def _encode_all(pushes: Sequence[LoggedPush]) -> list[bytes | None]:
    return [encode_push(push) for push in pushes]
