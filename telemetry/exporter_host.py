"""Feeds each exporter from the ingest log, at its own pace, from its own committed position.

The log is the source of truth; an exporter is just a consumer of it. Each
exporter gets one task that reads a batch after its committed position,
calls ``export``, and commits the position only once ``export`` returned, so
delivery is at least once and in log order. A failing exporter is retried
with exponential backoff and never slows acknowledgements or the other
exporters; after a restart it resumes where it committed. A batch an
exporter declares permanently unacceptable is reported, counted and skipped,
so one poisoned push cannot stall the pipeline for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exporters.api import BufferingExporter, ExportError, LogBoundExporter

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exporters.api import Exporter, LoggedPush
    from telemetry.config import ExporterSettings
    from telemetry.ingest import IngestLog

_log = logging.getLogger(__name__)

#: Upper bounds (seconds) of the export latency histogram.
EXPORT_BUCKETS_S: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
#: Consumer names in the log are namespaced so other consumers can coexist.
CONSUMER_PREFIX = "exporter:"
#: How often an idle host asks a buffering exporter how far it has made data durable.
DURABLE_POLL_S = 1.0


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

    def __init__(self, settings: ExporterSettings, exporter: Exporter, log: IngestLog) -> None:
        self.settings = settings
        self.exporter = exporter
        self.log = log
        self.stats = ExporterStats()
        self.consumer = CONSUMER_PREFIX + settings.name
        #: The next offset to read; ``committed`` trails it for buffering exporters.
        self.position = 0
        self.committed = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._started = False

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def lag(self) -> int:
        """Pushes logged but not yet durably exported."""
        return max(0, self.log.log_end - self.committed)

    async def start(self) -> None:
        if isinstance(self.exporter, LogBoundExporter):
            self.exporter.bind_log(self.log.log_id)
        await self.exporter.start()
        self._started = True
        self.position = await self.log.register(self.consumer)
        self.committed = self.position
        self._task = asyncio.create_task(self._run(), name=f"exporter-{self.name}")

    async def stop(self, drain_timeout_s: float = 5.0) -> None:
        """Export what is already logged (within the deadline), then flush and close."""
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), drain_timeout_s)
            except TimeoutError:
                _log.warning(
                    "exporter %s did not drain within %.1f s; it resumes at offset %d next start",
                    self.name,
                    drain_timeout_s,
                    self.position,
                )
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            self._task = None
        if self._started:
            try:
                await self.exporter.flush()
                await self._commit(self.position)
            finally:
                await self.exporter.close()

    async def _run(self) -> None:
        while True:
            batch = await asyncio.to_thread(
                self.log.read,
                self.position,
                self.settings.batch_max_records,
                self.settings.batch_max_bytes,
            )
            if not batch:
                if self._stopping.is_set() or not await self._wait_for_data():
                    return
                continue
            if not await self._export(batch):
                return
            self.position = batch[-1].offset + 1
            await self._commit(self.position)

    async def _commit(self, exported_end: int) -> None:
        """Commit what is durable: all that was exported, or what a buffering exporter landed."""
        target = exported_end
        if isinstance(self.exporter, BufferingExporter):
            target = min(target, self.exporter.durable_offset())
        if target > self.committed:
            await self.log.commit(self.consumer, target)
            self.committed = target

    async def _wait_for_data(self) -> bool:
        """Wait for a record at our position; False when asked to stop first.

        While idle, a buffering exporter may publish on its own timer, so its
        durable progress is committed every ``DURABLE_POLL_S``.
        """
        arrival = asyncio.ensure_future(self.log.wait_for(self.position))
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            while True:
                done, _ = await asyncio.wait(
                    {arrival, stop}, timeout=DURABLE_POLL_S, return_when=asyncio.FIRST_COMPLETED
                )
                if arrival in done:
                    arrival.result()  # re-raise a closed or failed log
                    return True
                if stop in done:
                    return False
                await self._commit(self.position)
        finally:
            arrival.cancel()
            stop.cancel()

    async def _export(self, batch: Sequence[LoggedPush]) -> bool:
        """Export until accepted (or permanently refused); False if stopped while retrying."""
        delay_ms = self.settings.retry_initial_ms
        while True:
            started = time.perf_counter()
            try:
                await self.exporter.export(batch)
            except Exception as caught:
                error = caught
            else:
                self.stats.observe(time.perf_counter() - started)
                self.stats.exported_batches += 1
                self.stats.exported_pushes += len(batch)
                return True
            self.stats.failures += 1
            if isinstance(error, ExportError) and not error.retryable:
                self.stats.skipped_pushes += len(batch)
                _log.error(
                    "exporter %s refused offsets %d..%d for good, skipping them: %s",
                    self.name,
                    batch[0].offset,
                    batch[-1].offset,
                    error,
                )
                return True
            # Anything else is worth a retry.
            _log.warning(
                "exporter %s failed on offsets %d..%d, retrying in %d ms: %s",
                self.name,
                batch[0].offset,
                batch[-1].offset,
                delay_ms,
                error,
            )
            if self._stopping.is_set():
                return False
            # Full jitter, so many failing exporters do not retry in step.
            await self._sleep_unless_stopped(random.uniform(0.5, 1.0) * delay_ms / 1000)
            delay_ms = min(delay_ms * 2, self.settings.retry_max_ms)

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
