"""The lake's maintenance schedule, run by the serving process without loading pyiceberg.

Each pass (``maintenance.maintenance_pass``: retention, compaction, expiry,
orphan cleanup) runs in a fresh worker process that exits after it
(``exporters.landing.pool.call_in_process``): a pass every
``maintenance_interval_s`` (10 min by default) costs a process start, and
pyiceberg and pyarrow are resident only while it runs. With the landing's
``workers = 0`` (tests, embedding) the pass runs on a thread here instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from exporters.iceberg.settings import MaintenanceStats
from exporters.landing.pool import call_in_process

if TYPE_CHECKING:
    from exporters.iceberg.settings import LakeLocation, MaintenanceSettings

__all__ = ["PASS_TARGET", "Maintenance"]

_log = logging.getLogger(__name__)

#: The pass a maintenance process runs (named: pickling the function would import it here).
PASS_TARGET = "exporters.iceberg.maintenance:maintenance_pass"


class Maintenance:
    """Runs a pass at start and every ``interval_s``; a failed pass is logged and retried."""

    def __init__(
        self, location: LakeLocation, settings: MaintenanceSettings, *, in_process: bool = False
    ) -> None:
        self.location = location
        self.settings = settings
        self.in_process = in_process
        self.stats = MaintenanceStats()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="iceberg-maintenance")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    def _pass(self, now_ms: int) -> tuple[MaintenanceStats, str | None]:
        if self.in_process:
            from exporters.iceberg.maintenance import maintenance_pass  # noqa: PLC0415

            return maintenance_pass(self.location, self.settings, now_ms)
        done: tuple[MaintenanceStats, str | None] = call_in_process(
            PASS_TARGET, self.location, self.settings, now_ms, name="kip714-lake-maintenance"
        )
        return done

    async def _run(self) -> None:
        while True:
            try:
                done, failure = await asyncio.to_thread(self._pass, int(time.time() * 1000))
            except Exception as error:  # the process died (the OOM killer, say)
                done, failure = MaintenanceStats(), str(error)
            _add(self.stats, done)
            if failure is not None:
                self.stats.failures += 1
                _log.error(
                    "lake maintenance pass failed; retried in %.0f s: %s",
                    self.settings.interval_s,
                    failure,
                )
            await asyncio.sleep(self.settings.interval_s)


def _add(total: Any, more: Any) -> None:
    for f in dataclasses.fields(total):
        setattr(total, f.name, getattr(total, f.name) + getattr(more, f.name))
