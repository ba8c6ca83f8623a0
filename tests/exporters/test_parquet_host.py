"""The real exporter host and ingest log replaying already-landed offsets into the landing."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import TYPE_CHECKING

from exporters.parquet import ParquetExporter
from telemetry.ingest import IngestLog
from telemetry.server.config import ExporterSettings
from telemetry.server.exporter_host import ExporterHost
from tests.exporters.parquet_support import every_file_reads, read_rows
from tests.exporters.support import PRODUCER_PUSH
from tests.telemetry.ingest.support import context

if TYPE_CHECKING:
    from pathlib import Path

SETTINGS = ExporterSettings(name="landing", type="parquet", batch_max_records=7)


async def _committed(host: ExporterHost, target: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while host.committed < target:
        assert time.monotonic() < deadline, (host.committed, target)
        await asyncio.sleep(0.05)


async def test_a_rewound_commit_replays_into_the_landing_without_duplicates(
    tmp_path: Path,
) -> None:
    data = PRODUCER_PUSH.read_bytes()  # 10 data points
    log = await IngestLog.open(tmp_path / "log")
    try:
        for seq in range(20):
            await log.append(context(seq), data)
        options = {"path": str(tmp_path), "max_file_age_s": 0.2}
        host = ExporterHost(SETTINGS, ParquetExporter(options), log)
        await host.start()
        await _committed(host, 20)  # published by age, committed by the idle poll
        await host.stop()
        # A SIGKILL between publishing and committing: the log still says 5.
        await log.commit(host.consumer, 5)

        exporter = ParquetExporter(options)
        replay = ExporterHost(SETTINGS, exporter, log)
        await replay.start()
        assert replay.position == 5
        for seq in range(20, 25):
            await log.append(context(seq), data)
        await _committed(replay, 25)
        await replay.stop()
        assert exporter.stats.replayed_pushes_skipped == 15
    finally:
        await log.close()
    per_offset = collections.Counter(r["push_offset"] for r in read_rows(tmp_path))
    assert per_offset == dict.fromkeys(range(25), 10)
    assert every_file_reads(tmp_path) == 250
