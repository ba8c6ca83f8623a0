"""Committed positions, retention by position, and the disk budget."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from telemetry.errors import ErrorCode, ThrottlingQuotaExceededError
from telemetry.ingest import IngestLog, LogConfig, LogFullError, OffsetOutOfRangeError
from tests.telemetry.ingest.support import SMALL, append_many, context, payload, segment_files

if TYPE_CHECKING:
    from pathlib import Path


def _bases(directory: Path) -> list[int]:
    return [int(name.removesuffix(".log")) for name in segment_files(directory)]


async def test_committed_positions_survive_reopen(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path)
    await append_many(log, range(10))
    assert await log.register("parquet") == 0
    await log.commit("parquet", 7)
    await log.commit("jsonl", 3)
    await log.commit("jsonl", 4)
    assert log.committed("jsonl") == 4
    await log.close()

    log = await IngestLog.open(tmp_path)
    assert log.consumers() == {"parquet": 7, "jsonl": 4}
    assert await log.register("parquet") == 7
    assert [r.offset for r in log.read(log.committed("parquet"))] == [7, 8, 9]
    with pytest.raises(KeyError):
        log.committed("unknown")
    with pytest.raises(OffsetOutOfRangeError):
        await log.commit("parquet", 11)  # past the durable end
    await log.close()
    assert not list(tmp_path.glob("*.tmp"))


async def test_unreadable_positions_file_refuses_to_open(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path)
    await log.commit("parquet", 0)
    await log.close()
    (tmp_path / "consumers.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="unreadable consumer positions"):
        await IngestLog.open(tmp_path)


async def test_retention_deletes_only_fully_consumed_segments(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append_many(log, range(30))
    bases = _bases(tmp_path)
    assert len(bases) >= 5
    await log.register("slow")
    await log.commit("fast", 30)
    assert _bases(tmp_path) == bases  # "slow" still needs everything
    await log.commit("slow", bases[2] + 1)  # inside the third segment
    # The first two segments are passed by both; the third is not.
    assert _bases(tmp_path) == bases[2:]
    assert log.log_start == bases[2]
    assert log.stats.segments_deleted == 2
    assert log.read(bases[2])[0].offset == bases[2]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[2] - 1)

    await log.commit("slow", bases[-1])  # exactly at the active segment's start
    assert _bases(tmp_path) == bases[-1:]
    await log.commit("slow", 30)
    assert _bases(tmp_path) == bases[-1:]  # the active segment is never deleted
    assert log.retained_bytes == (tmp_path / segment_files(tmp_path)[0]).stat().st_size
    await log.close()

    log = await IngestLog.open(tmp_path, SMALL)
    assert log.log_start == bases[-1]
    assert log.log_end == 30
    await log.close()


async def test_unregistered_consumer_stops_holding_back_retention(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append_many(log, range(20))
    await log.register("removed")
    await log.commit("current", 20)
    assert len(_bases(tmp_path)) > 1  # "removed" still needs everything
    await log.unregister("removed")
    assert len(_bases(tmp_path)) == 1
    assert log.consumers() == {"current": 20}
    await log.close()


async def test_nothing_is_deleted_without_consumers(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, SMALL)
    await append_many(log, range(20))
    await log.close()
    log = await IngestLog.open(tmp_path, SMALL)
    assert log.log_start == 0
    assert [r.offset for r in log.read(0, max_records=100)] == list(range(20))
    await log.close()


async def test_disk_budget_refuses_then_accepts_after_commit(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=4096, max_bytes=8192, full_throttle_ms=750)
    log = await IngestLog.open(tmp_path, config)
    await log.register("parquet")
    accepted = 0
    refusal: LogFullError | None = None
    for seq in range(100):
        try:
            await log.append(context(seq), payload(seq, 500))
        except LogFullError as exc:
            refusal = exc
            break
        accepted += 1
    assert 10 <= accepted < 20
    assert refusal is not None
    error = refusal
    assert isinstance(error, ThrottlingQuotaExceededError)
    assert error.error_code is ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert error.throttle_time_ms == 750
    assert "'parquet' is at offset 0" in error.reason
    assert log.stats.refused_full == 1
    assert log.stats.full
    assert log.stats.last_refusal_reason == error.reason
    assert log.retained_bytes <= config.max_bytes
    assert log.log_end == accepted  # nothing of the refused push was logged

    with pytest.raises(LogFullError):
        await log.append(context(accepted), payload(accepted, 500))
    assert log.stats.refused_full == 2

    await log.commit("parquet", log.log_end)
    assert await log.append(context(accepted), payload(accepted, 500)) == accepted
    stats = log.stats  # a fresh expression: mypy narrowed ``log.stats.full`` above
    assert not stats.full
    await log.close()


async def test_budget_counts_appends_still_in_flight(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=4096, max_bytes=8192)
    log = await IngestLog.open(tmp_path, config)
    await log.register("parquet")
    tasks = [log.append(context(i), payload(i, 500)) for i in range(40)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    accepted = [r for r in results if isinstance(r, int)]
    refused = [r for r in results if isinstance(r, LogFullError)]
    assert len(accepted) + len(refused) == 40
    assert refused
    assert accepted == list(range(len(accepted)))
    assert log.retained_bytes <= config.max_bytes
    await log.close()


def test_budget_must_hold_two_segments() -> None:
    with pytest.raises(ValueError, match="twice segment_bytes"):
        LogConfig(segment_bytes=4096, max_bytes=8191)
