"""Feeds each exporter from the ingest log, at its own pace, from its own committed position.

The log is the source of truth; an exporter is just a consumer of it. Each
exporter gets one task that reads a batch after its committed position,
calls ``export``, and commits the position only once ``export`` returned, so
delivery is at least once and in log order. A failing exporter is retried
with exponential backoff and never slows acknowledgements or the other
exporters; after a restart it resumes where it committed. A batch an
exporter declares permanently unacceptable is reported, counted and skipped,
so one poisoned push cannot stall the pipeline for good.

Failures never end the host's task quietly: an error from the exporter or
from the log (``read``, ``wait_for``, ``commit``, ``durable_offset``) is
logged once when a streak of failures starts (the traceback at DEBUG),
counted, and retried with backoff; recovery is logged too. ``problem``
tells readiness when the exporter has failed, keeps failing, or is stalled.

Stopping is bounded and never commits past what the exporter made durable:
the drain and the final flush each get ``drain_timeout_s``; what is not done
by then is cancelled (the landing then abandons its generation) and
stays in the log for the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from exporters.api import BufferingExporter, ExportError, LogBoundExporter
from telemetry.ingest import LogClosedError, LogFailedError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from exporters.api import Exporter, LoggedPush
    from telemetry.ingest import IngestLog
    from telemetry.server.config import ExporterSettings

_log = logging.getLogger(__name__)

#: Upper bounds (seconds) of the export latency histogram.
EXPORT_BUCKETS_S: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
#: Consumer names in the log are namespaced so other consumers can coexist.
CONSUMER_PREFIX = "exporter:"
#: How often an idle host asks a buffering exporter how far it has made data durable.
DURABLE_POLL_S = 1.0
#: Failed attempts in a row after which readiness reports the exporter as failing.
FAILING_AFTER = 3
#: How long a cancelled host task, or an exporter's close, may take to unwind.
CANCEL_GRACE_S = 10.0


@dataclass(slots=True)
class ExporterStats:
    exported_pushes: int = 0
    exported_batches: int = 0
    failures: int = 0
    skipped_pushes: int = 0
    export_seconds_total: float = 0.0
    export_bucket_counts: list[int] = field(
        default_factory=lambda: [0] * (len(EXPORT_BUCKETS_S) + 1)
    )

    def observe(self, seconds: float) -> None:
        self.export_seconds_total += seconds
        for index, bound in enumerate(EXPORT_BUCKETS_S):
            if seconds <= bound:
                self.export_bucket_counts[index] += 1
                return
        self.export_bucket_counts[-1] += 1


class ExporterHost:
    """Runs one exporter against the log."""

    def __init__(
        self,
        settings: ExporterSettings,
        exporter: Exporter,
        log: IngestLog,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._init_host(settings, exporter, clock)
        self.log = log

    def _init_host(
        self, settings: ExporterSettings, exporter: Exporter, clock: Callable[[], float]
    ) -> None:
        """What every host has, whichever log feeds it (``KafkaExporterHost`` has no ``log``)."""
        self.settings = settings
        self.exporter = exporter
        self.stats = ExporterStats()
        self.consumer = CONSUMER_PREFIX + settings.name
        #: The next offset to read; ``committed`` trails it for buffering exporters.
        self.position = 0
        self.committed = 0
        #: Why the host task ended without being stopped (a bug), else ``None``.
        self.died: str | None = None
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._started = False
        self._doing = "starting"
        self._failing_since: float | None = None
        self._consecutive_failures = 0
        self._last_error = ""
        self._delay_ms = settings.retry_initial_ms
        self._progress_at = clock()

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def lag(self) -> int:
        """Pushes logged but not yet durably exported."""
        return max(0, self.log.log_end - self.committed)

    @property
    def failure(self) -> str | None:
        """Why this exporter is out of order until a restart, else ``None``.

        Its task died, or the exporter says it fail-stopped (an optional
        ``failure: str | None`` attribute).
        """
        if self.died is not None:
            return f"exporter {self.name}: its task died: {self.died}"
        reported = getattr(self.exporter, "failure", None)
        if isinstance(reported, str):
            return f"exporter {self.name} has failed: {reported}"
        return None

    def problem(self) -> str | None:
        """Why this exporter makes the server unready (failed, failing, stalled), or ``None``."""
        failure = self.failure
        if failure is not None:
            return failure
        failing = getattr(self.exporter, "failing", None)
        if isinstance(failing, str):  # it retries by itself (the landing's catalog or disk)
            return f"exporter {self.name} is failing: {failing}"
        now = self._clock()
        if self._failing_since is not None and self._consecutive_failures >= FAILING_AFTER:
            return (
                f"exporter {self.name} is failing: {self._consecutive_failures} attempts in a "
                f"row over {now - self._failing_since:.0f} s, last: {self._last_error}"
            )
        lag, quiet_s = self.lag, now - self._progress_at
        if lag > 0 and quiet_s >= self.settings.stall_timeout_s:
            return (
                f"exporter {self.name} is stalled: {lag} pushes behind and no committed "
                f"progress for {quiet_s:.0f} s"
            )
        return None

    async def start(self) -> None:
        if isinstance(self.exporter, LogBoundExporter):
            self.exporter.bind_log(self.log.log_id)
        await self.exporter.start()
        self._started = True
        self.position = await self.log.register(self.consumer)
        self.committed = self.position
        self._progress_at = self._clock()
        self._task = asyncio.create_task(self._run(), name=f"exporter-{self.name}")
        self._task.add_done_callback(self._task_done)

    async def stop(self, drain_timeout_s: float | None = None) -> None:
        """Export what is logged, flush, commit what is durable, close; each step bounded.

        The drain and the flush each get ``drain_timeout_s`` (the exporter's
        setting by default); what is not exported by then stays in the log
        for the next start. Cancelling ``stop`` skips neither the commit of
        what is durable nor the exporter's ``close``; the cancellation is
        re-raised after them.
        """
        timeout_s = self.settings.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        self._stopping.set()
        cancelled: asyncio.CancelledError | None = None
        try:
            await self._drain(timeout_s)
            if self._started:
                await self._flush(timeout_s)
        except asyncio.CancelledError as error:
            cancelled = error
            await self._cancel_task()
        try:
            if self._started:
                await self._final_commit()
        finally:
            if self._started:
                self._started = False
                await self._close_exporter()
        if cancelled is not None:
            raise cancelled

    async def _drain(self, timeout_s: float) -> None:
        task = self._task
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            _log.warning(
                "exporter %s did not drain within %.1f s; what is left is exported after "
                "the next start",
                self.name,
                timeout_s,
            )
            await self._cancel_task()

    async def _cancel_task(self) -> None:
        task = self._task
        if task is None or task.done():
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
        if not done:
            _log.error(
                "exporter %s did not stop within %.1f s of cancelling", self.name, CANCEL_GRACE_S
            )

    async def _flush(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self.exporter.flush(), timeout_s)
        except TimeoutError:
            _log.warning(
                "exporter %s did not flush within %.1f s; the unflushed pushes are exported "
                "after the next start",
                self.name,
                timeout_s,
            )
        except Exception as error:
            _log.warning(
                "exporter %s could not flush (%s); the unflushed pushes are exported after "
                "the next start",
                self.name,
                error,
            )
            _log.debug("exporter %s flush failure", self.name, exc_info=error)

    async def _final_commit(self) -> None:
        try:
            await self._commit(self.position)
        except Exception as error:
            _log.warning("exporter %s could not commit its final position: %s", self.name, error)
            _log.debug("exporter %s commit failure", self.name, exc_info=error)
        _log.info(
            "exporter %s stopped at offset %d of %d", self.name, self.committed, self.log.log_end
        )

    async def _close_exporter(self) -> None:
        try:
            await asyncio.wait_for(self.exporter.close(), CANCEL_GRACE_S)
        except Exception as error:
            _log.error("exporter %s failed to close: %s", self.name, error)
            _log.debug("exporter %s close failure", self.name, exc_info=error)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """Log a host task that ended on its own at once, not when the server stops."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.died = f"{type(error).__name__}: {error}"
            _log.error(
                "exporter %s stopped exporting, its task died; it resumes at offset %d after "
                "a restart",
                self.name,
                self.committed,
                exc_info=error,
            )
        elif not self._stopping.is_set():
            self.died = "the task ended without being stopped"
            _log.error("exporter %s stopped exporting: %s", self.name, self.died)

    # -- the feeding loop --------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                self._rewind()
                if not await self._step():
                    return
            except Exception as error:  # every error is retried; none ends the task
                self._failed(error)
                if self._stopping.is_set():
                    return
                # Full jitter, so many failing exporters do not retry in step.
                await self._sleep_unless_stopped(random.uniform(0.5, 1.0) * self._delay_ms / 1000)
                self._delay_ms = min(self._delay_ms * 2, self.settings.retry_max_ms)
            else:
                self._succeeded()

    async def _step(self) -> bool:
        """Read, export and commit one batch, or wait for one; False once stopped and drained."""
        self._doing = f"reading the log at offset {self.position}"
        batch = await asyncio.to_thread(
            self.log.read,
            self.position,
            self.settings.batch_max_records,
            self.settings.batch_max_bytes,
        )
        if not batch:
            if self._stopping.is_set():
                return False
            return await self._wait_for_data()
        self._doing = f"exporting offsets {batch[0].offset}..{batch[-1].offset}"
        await self._export(batch)
        self.position = batch[-1].offset + 1
        self._doing = f"committing offset {self.position}"
        await self._commit(self.position)
        return True

    def _rewind(self) -> bool:
        """Read again from where a buffering exporter asks (it dropped what it buffered).

        An exporter with ``take_replay() -> int | None`` (the landing, after a
        failed write or commit) gives the offset once; nothing before it is
        committed here, so the log still holds every push from there.
        """
        take = getattr(self.exporter, "take_replay", None)
        offset = take() if callable(take) else None
        if not isinstance(offset, int) or offset >= self.position:
            return False
        self.position = max(offset, self.committed)
        return True

    def _failed(self, error: Exception) -> None:
        """Count every failed attempt; log only the first of a streak (one line)."""
        self.stats.failures += 1
        self._consecutive_failures += 1
        self._last_error = f"{self._doing}: {type(error).__name__}: {error}"
        if self._failing_since is None:
            self._failing_since = self._clock()
            _log.error(
                "exporter %s failed %s: %s: %s; retrying with backoff",
                self.name,
                self._doing,
                type(error).__name__,
                error,
            )
            _log.debug("exporter %s failure", self.name, exc_info=error)

    def _succeeded(self) -> None:
        if self._failing_since is not None:
            _log.info(
                "exporter %s recovered after %d failed attempts in %.1f s",
                self.name,
                self._consecutive_failures,
                self._clock() - self._failing_since,
            )
        self._failing_since = None
        self._consecutive_failures = 0
        self._delay_ms = self.settings.retry_initial_ms

    async def _commit(self, exported_end: int) -> None:
        """Commit what is durable: all that was exported, or what a buffering exporter landed."""
        target = exported_end
        if isinstance(self.exporter, BufferingExporter):
            target = min(target, self.exporter.durable_offset())
        if target > self.committed:
            await self.log.commit(self.consumer, target)
            self.committed = target
            self._progress_at = self._clock()
        elif self.committed >= self.log.log_end:
            self._progress_at = self._clock()  # caught up: nothing can be stalled

    async def _wait_for_data(self) -> bool:
        """Wait for a record at our position; False when asked to stop first.

        While idle, a buffering exporter may publish on its own timer, so its
        durable progress is committed every ``DURABLE_POLL_S``. A log that
        failed or closed sends nothing more; the host then only commits until
        it is stopped (readiness reports the log itself).
        """
        loop = asyncio.get_running_loop()
        arrival: asyncio.Future[None] = asyncio.ensure_future(self.log.wait_for(self.position))
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stopping.wait())
        try:
            while True:
                self._doing = f"waiting for offset {self.position}"
                done, _ = await asyncio.wait(
                    {arrival, stop}, timeout=DURABLE_POLL_S, return_when=asyncio.FIRST_COMPLETED
                )
                if stop in done:
                    return False
                if arrival in done:
                    error = arrival.exception()
                    if error is None:
                        return True
                    if not isinstance(error, LogClosedError | LogFailedError):
                        raise error
                    arrival = loop.create_future()  # nothing more will arrive
                self._doing = "committing durable progress"
                await self._commit(self.position)
                self._succeeded()
                if self._rewind():  # the landing dropped a generation on its own timer
                    return True
        finally:
            arrival.cancel()
            stop.cancel()

    async def _export(self, batch: Sequence[LoggedPush]) -> None:
        """Export ``batch``; a permanent refusal skips it, any other error is raised for a retry."""
        started = time.perf_counter()
        try:
            await self.exporter.export(batch)
        except ExportError as error:
            if error.retryable:
                raise
            self.stats.failures += 1
            self.stats.skipped_pushes += len(batch)
            _log.error(
                "exporter %s refused offsets %d..%d for good, skipping them: %s",
                self.name,
                batch[0].offset,
                batch[-1].offset,
                error,
            )
            return
        self.stats.observe(time.perf_counter() - started)
        self.stats.exported_batches += 1
        self.stats.exported_pushes += len(batch)

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
