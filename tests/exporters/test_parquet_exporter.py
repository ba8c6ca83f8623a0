"""ParquetExporter behaviour: options, file sizing, raw pushes, replay, failure, exclusivity."""

from __future__ import annotations

import asyncio
import itertools
import resource
import time
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint

from exporters import registry
from exporters.api import BufferingExporter, TransientExportError
from exporters.parquet import ParquetExporter
from exporters.parquet.worker import WorkerConfig, WorkerLanding
from tests.exporters.parquet_support import (
    every_file_reads,
    land,
    land_async,
    parquet_files,
    read_rows,
)
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, T1, payload, push

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from exporters.api import LoggedPush


HOUR_NS = 3_600 * 10**9


def pushes(first: int, count: int) -> list[LoggedPush]:
    data = (PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes())
    return [push(data[i % 2], offset=first + i) for i in range(count)]


def rows_for(count: int) -> int:
    return sum(10 if i % 2 == 0 else 15 for i in range(count))


@pytest.mark.parametrize(
    ("options", "error", "key"),
    [
        ({}, TypeError, "path"),
        ({"path": "x", "colour": 1}, TypeError, "colour"),
        ({"path": ""}, ValueError, "path"),
        ({"path": "x", "max_rows_per_file": 0}, ValueError, "max_rows_per_file"),
        ({"path": "x", "max_file_age_s": "1"}, ValueError, "max_file_age_s"),
        ({"path": "x", "workers": 0}, ValueError, "workers"),
        ({"path": "x", "raw": "yes"}, ValueError, "raw"),
        ({"path": "x", "compression_level": 30}, ValueError, "compression_level"),
    ],
)
def test_bad_options_are_refused_naming_the_key(
    options: dict[str, Any], error: type[Exception], key: str
) -> None:
    with pytest.raises(error, match=key):
        ParquetExporter(options)


def test_the_registry_builds_it_and_reports_the_key() -> None:
    exporter = registry.create("landing", "parquet", {"path": "somewhere"})
    assert isinstance(exporter, BufferingExporter)
    with pytest.raises(registry.ExporterConfigError) as caught:
        registry.create("landing", "parquet", {"path": "x", "workers": -1})
    assert caught.value.key == "workers"


def test_files_roll_by_rows(tmp_path: Path) -> None:
    batches = [pushes(i * 2, 2) for i in range(12)]  # 25 rows per batch
    exporter = land(tmp_path, batches, max_rows_per_file=40)
    files = parquet_files(tmp_path)
    # Row counts come back from the worker a few batches late, so a file holds
    # at least 40 rows (the last one: whatever the flush found) and at most
    # 40 plus the batches in flight.
    sizes = [pq.ParquetFile(p).metadata.num_rows for p in files]
    assert len(files) >= 3
    assert all(40 <= n <= 40 + 25 * 4 for n in sizes[:-1]), sizes
    assert exporter.stats.generations_published == len(files)
    assert exporter.stats.rows_landed == rows_for(24) == every_file_reads(tmp_path)
    ranges = sorted(tuple(int(x) for x in p.stem.split("-")[1:3]) for p in files)
    assert ranges[0][0] == 0 and ranges[-1][1] == 23
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))


async def test_files_roll_by_age_without_a_flush(tmp_path: Path) -> None:
    exporter = ParquetExporter({"path": str(tmp_path), "max_file_age_s": 0.2})
    await exporter.start()
    try:
        await exporter.export(pushes(0, 2))
        assert exporter.durable_offset() == 0
        deadline = time.monotonic() + 10
        while exporter.durable_offset() < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert exporter.durable_offset() == 2
        assert len(parquet_files(tmp_path)) == 1
        await exporter.export(pushes(2, 1))
        assert exporter.durable_offset() == 2  # the new generation is not published yet
    finally:
        await exporter.close()
    assert exporter.durable_offset() == 3
    assert len(parquet_files(tmp_path)) == 2


def test_raw_keeps_every_push_with_its_context_and_bytes(tmp_path: Path) -> None:
    batch = [*pushes(5, 2), push(b"\x00garbage", offset=7, principal=None)]
    land(tmp_path, [batch], raw=True)
    raw = read_rows(tmp_path, "pushes")
    assert [r["push_offset"] for r in raw] == [5, 6, 7]
    assert [r["payload"] for r in raw] == [p.payload for p in batch]
    assert raw[0]["client_instance_id"] == batch[0].client_instance_id
    assert raw[0]["received_time"] == batch[0].received_time_ms * 1000
    assert raw[2]["principal"] is None
    assert {r["hour"] for r in raw} == {r["hour"] for r in read_rows(tmp_path)}
    assert len(read_rows(tmp_path)) == rows_for(2)


def test_without_raw_there_is_no_pushes_table(tmp_path: Path) -> None:
    land(tmp_path, [pushes(0, 2)])
    assert not (tmp_path / "pushes").exists()
    assert parquet_files(tmp_path)


def test_replayed_offsets_land_once(tmp_path: Path) -> None:
    first = land(tmp_path, [pushes(0, 4)])
    assert first.durable_offset() == 4
    # After a restart the host replays from an older commit (here: from 0).
    second = land(tmp_path, [pushes(0, 3), pushes(3, 4)])
    assert second.stats.replayed_pushes_skipped == 4
    offsets = [r["push_offset"] for r in read_rows(tmp_path)]
    assert sorted(set(offsets)) == list(range(7))
    assert len(offsets) == rows_for(4) + 15 + 10 + 15  # offsets 4..6 of pushes(3, 4)


def test_two_workers_land_the_same_rows_as_one(tmp_path: Path) -> None:
    batches = [pushes(i * 3, 3) for i in range(4)]
    land(tmp_path / "one", batches, workers=1)
    land(tmp_path / "two", batches, workers=2)
    one, two = read_rows(tmp_path / "one"), read_rows(tmp_path / "two")
    assert len(one) == len(two) == 4 * (10 + 15 + 10)
    assert sorted(map(repr, one)) == sorted(map(repr, two))
    assert len(parquet_files(tmp_path / "two")) == 2  # one file per worker and hour


async def test_a_dead_worker_stops_the_landing_until_restart(tmp_path: Path) -> None:
    exporter = ParquetExporter({"path": str(tmp_path)})
    await exporter.start()
    try:
        await exporter.export(pushes(0, 2))
        await exporter.flush()
        await exporter.export(pushes(2, 2))
        exporter._handles[0].process.kill()  # as the OOM killer would
        await exporter.export(pushes(4, 1))  # may still be accepted: the death is not seen yet
        with pytest.raises(TransientExportError, match="restart"):
            await asyncio.wait_for(_export_until_refused(exporter), 20)
        assert exporter.durable_offset() == 2
        assert exporter.stats.failures == 1
    finally:
        await exporter.close()
    # The restart replays from 2; nothing of 2..4 was published, nothing is duplicated.
    restarted = await land_async(tmp_path, [pushes(2, 3)])
    assert restarted.stats.replayed_pushes_skipped == 0
    offsets = [r["push_offset"] for r in read_rows(tmp_path)]
    assert sorted(set(offsets)) == list(range(5))
    assert len(offsets) == rows_for(5)


async def _export_until_refused(exporter: ParquetExporter) -> None:
    offset = 5
    while True:
        await exporter.export(pushes(offset, 1))
        offset += 1
        await asyncio.sleep(0.05)


async def test_one_landing_root_takes_one_exporter(tmp_path: Path) -> None:
    first = ParquetExporter({"path": str(tmp_path)})
    second = ParquetExporter({"path": str(tmp_path)})
    await first.start()
    try:
        with pytest.raises(RuntimeError, match="in use"):
            await second.start()
    finally:
        await first.close()
        await second.close()
    # Released on close.
    third = ParquetExporter({"path": str(tmp_path)})
    await third.start()
    await third.close()


async def test_durable_offset_follows_exports_when_nothing_is_pending(tmp_path: Path) -> None:
    exporter = ParquetExporter({"path": str(tmp_path)})
    await exporter.start()
    try:
        assert exporter.durable_offset() == 0
        await exporter.export([push(b"\xff bad", offset=9)])
        await exporter.flush()  # nothing to land: no file, but the offset is done
        assert exporter.durable_offset() == 10
        assert not parquet_files(tmp_path)
    finally:
        await exporter.close()


async def test_many_hours_at_once_seal_the_generation_early(tmp_path: Path) -> None:
    # A replay of a log spanning 130 hours: each push received (and timed) in
    # its own hour, so 130 honest partitions in one batch.
    batch = []
    for h in range(130):
        points = [NumberDataPoint(time_unix_nano=T1 + h * HOUR_NS, as_int=h)]
        data = payload(Metric(name="replayed", gauge=Gauge(data_points=points)))
        batch.append(push(data, offset=1 + h, received_time_ms=(T1 + h * HOUR_NS) // 10**6))
    exporter = ParquetExporter({"path": str(tmp_path), "max_file_age_s": 3600})
    await exporter.start()
    try:
        await exporter.export(batch)
        deadline = time.monotonic() + 20
        while exporter.stats.pending_rows < 130 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        # The worker kept 128 files open, closing the two least recent early.
        assert exporter.stats.spilled_files == 2
        await exporter.export(pushes(200, 1))  # the next export sees 128 open files and seals
        assert exporter.durable_offset() == 201
        assert len(parquet_files(tmp_path)) == 131  # 130 hours, and the last push's
        assert every_file_reads(tmp_path) == 130 + rows_for(1)
    finally:
        await exporter.close()


def _points_in_hours(hours: range) -> bytes:
    points = [NumberDataPoint(time_unix_nano=T1 + h * HOUR_NS, as_int=h) for h in hours]
    return payload(Metric(name="wild", gauge=Gauge(data_points=points)))


@pytest.fixture
def common_fd_limit() -> Iterator[None]:
    """The usual soft limit of 1024 open files, inherited by the worker process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.usefixtures("common_fd_limit")
def test_a_push_spanning_3000_hours_lands_in_bounded_partitions(tmp_path: Path) -> None:
    """A wild clock must not choose how many files a push opens (fd exhaustion, replay loop)."""
    received_ms = T1 // 10**6
    wild = push(_points_in_hours(range(-1500, 1500)), offset=1, received_time_ms=received_ms)
    exporter = land(tmp_path, [[wild]])
    rows = read_rows(tmp_path)
    assert len(rows) == 3000  # every point landed, each with its own time
    assert sorted(r["time"] for r in rows) == [
        (T1 + h * HOUR_NS) // 1000 for h in range(-1500, 1500)
    ]
    # Within 24 h of the receive time: the point's own hour; beyond: the receive hour.
    received_hour = received_ms // 3_600_000
    skewed = [abs(r["time"] - received_ms * 1000) > 24 * 3_600_000_000 for r in rows]
    hours = {
        received_hour if far else r["time"] // 3_600_000_000
        for r, far in zip(rows, skewed, strict=True)
    }
    assert sum(skewed) == exporter.stats.skewed_times == 3000 - 48
    assert len(parquet_files(tmp_path)) == len(hours) == 48  # not 3,000
    for row, far in zip(rows, skewed, strict=True):
        expected_hour = received_hour if far else row["time"] // 3_600_000_000
        assert row["hour"] == expected_hour % 24
    assert exporter.stats.spilled_files == 0


def test_more_hours_than_open_files_spill_and_still_land_once(tmp_path: Path) -> None:
    """Past the per-worker cap the least recent writer is closed; its hour gets a new part."""
    landing = WorkerLanding(
        WorkerConfig(str(tmp_path), 0, "t", False, None, 1000, max_open_files=4)
    )
    (tmp_path / "_landing" / "staging").mkdir(parents=True)

    def batch(offset: int, hours: list[int]) -> list[LoggedPush]:
        return [
            push(
                _points_in_hours(range(h, h + 1)),
                offset=offset + n,
                received_time_ms=(T1 + h * HOUR_NS) // 10**6,
            )
            for n, h in enumerate(hours)
        ]

    first = landing.batch(batch(10, [0, 1, 2, 3, 4, 5]))  # 6 hours: the 2 eldest spill
    assert (first.open_files, first.spilled_files) == (4, 2)
    second = landing.batch(batch(16, [0, 1]))  # those 2 again: new parts, 2 more spill
    assert (second.open_files, second.spilled_files) == (4, 2)
    sealed = landing.seal(10, 17)
    names = sorted(f.final.rsplit("/", 1)[1] for f in sealed)
    assert len(sealed) == 8  # hours 0 and 1 have two parts each
    assert sum(name.endswith("-p1.parquet") for name in names) == 2
    assert sum(f.rows for f in sealed) == 8
    spilled = [f for f in sealed if f.staged.endswith("-p0.parquet.tmp") and f.rows == 1]
    assert spilled
    meta = pq.read_metadata(tmp_path / "_landing" / "staging" / sealed[0].staged).metadata
    assert meta[b"kip714.table"] == b"metrics"
    assert int(meta[b"kip714.first_offset"]) >= 10
