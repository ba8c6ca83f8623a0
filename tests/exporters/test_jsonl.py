"""The jsonl exporter: lines match the flattened rows, lifecycle and failure handling."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint

from exporters.api import TransientExportError
from exporters.jsonl import DEFAULT_FILE_NAME, JsonlExporter
from exporters.otlp_rows import COLUMNS, flatten_batch, iter_rows
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, T0, T1, payload, push


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_lines_are_the_flattened_rows_in_log_order(tmp_path: Path) -> None:
    batch = [
        push(PRODUCER_PUSH.read_bytes(), offset=1),
        push(CONSUMER_PUSH.read_bytes(), offset=2, terminating=True),
    ]
    exporter = JsonlExporter({"path": str(tmp_path / "out.jsonl")})
    await exporter.start()
    await exporter.export(batch)
    await exporter.close()

    lines = read_lines(tmp_path / "out.jsonl")
    rows = list(iter_rows(flatten_batch(batch)[0]))
    assert len(lines) == len(rows) == 25
    for line, expected in zip(lines, rows, strict=True):
        assert list(line) == list(COLUMNS)
        for name in ("time", "start_time", "received_time"):
            expected[name] = _iso(expected[name])
        assert line == expected
    assert [line["push_offset"] for line in lines] == [1] * 10 + [2] * 15
    assert exporter.stats.data_points == 25


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    from datetime import UTC, datetime  # noqa: PLC0415

    stamp = datetime.fromtimestamp(ns // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ns % 10**9:09d}Z"


async def test_times_are_iso_8601_utc_with_nanoseconds(tmp_path: Path) -> None:
    metric = Metric(
        name="g",
        gauge=Gauge(
            data_points=[
                NumberDataPoint(time_unix_nano=T1, start_time_unix_nano=T0, as_int=1),
                NumberDataPoint(time_unix_nano=1_000_000_001, as_int=2),
            ]
        ),
    )
    exporter = JsonlExporter({"path": str(tmp_path / "t.jsonl")})
    await exporter.start()
    await exporter.export([push(payload(metric), received_time_ms=0)])
    await exporter.close()
    lines = read_lines(tmp_path / "t.jsonl")
    assert lines[0]["time"] == "2026-11-21T04:20:59.705846000Z"
    assert lines[0]["start_time"] == "2026-11-21T04:20:58.625605000Z"
    assert lines[1]["time"] == "1970-01-01T00:00:01.000000001Z"
    assert lines[1]["start_time"] is None
    assert lines[1]["received_time"] == "1970-01-01T00:00:00.000000000Z"


async def test_a_directory_path_means_the_default_file_and_parents_are_created(
    tmp_path: Path,
) -> None:
    existing = tmp_path / "existing"
    existing.mkdir()
    exporter = JsonlExporter({"path": existing})
    await exporter.start()
    assert exporter.path == existing / DEFAULT_FILE_NAME
    await exporter.close()

    nested = JsonlExporter({"path": str(tmp_path / "a" / "b") + os.sep})
    await nested.start()
    assert nested.path == tmp_path / "a" / "b" / DEFAULT_FILE_NAME
    assert nested.path.exists()
    await nested.close()

    file_in_new_dir = JsonlExporter({"path": str(tmp_path / "c" / "x.jsonl")})
    await file_in_new_dir.start()
    assert (tmp_path / "c" / "x.jsonl").is_file()
    await file_in_new_dir.close()


def test_construction_has_no_side_effects(tmp_path: Path) -> None:
    JsonlExporter({"path": str(tmp_path / "never" / "created.jsonl"), "fsync": True})
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    ("config", "error", "named"),
    [
        ({"path": "x", "colour": 1}, TypeError, "'colour'"),
        ({}, TypeError, "'path'"),
        ({"path": ""}, ValueError, "'path'"),
        ({"path": 3}, ValueError, "'path'"),
        ({"path": "x", "fsync": "yes"}, ValueError, "'fsync'"),
        ({"path": "x", "fsync": 1}, ValueError, "'fsync'"),
    ],
)
def test_bad_options_name_the_key(
    config: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        JsonlExporter(config)


async def test_appends_across_restarts_and_repairs_a_torn_last_line(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    batch = [push(PRODUCER_PUSH.read_bytes(), offset=1)]
    first = JsonlExporter({"path": str(out)})
    await first.start()
    await first.export(batch)
    await first.close()
    with out.open("ab") as f:
        f.write(b'{"time":"torn')  # a crash in the middle of a line
    second = JsonlExporter({"path": str(out), "fsync": True})
    await second.start()
    await second.export(batch)  # at least once: the replayed batch appears again
    await second.flush()
    await second.close()
    raw = out.read_text().splitlines()
    assert raw[10] == '{"time":"torn'
    parsed = []
    for line in raw:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    assert len(parsed) == 20
    # Readers deduplicate by push_offset.
    assert {line["push_offset"] for line in parsed} == {1}


async def test_close_is_idempotent_valid_without_start_and_final(tmp_path: Path) -> None:
    never_started = JsonlExporter({"path": str(tmp_path / "n.jsonl")})
    await never_started.close()
    await never_started.close()
    assert not (tmp_path / "n.jsonl").exists()

    exporter = JsonlExporter({"path": str(tmp_path / "o.jsonl")})
    await exporter.start()
    await exporter.close()
    await exporter.close()
    with pytest.raises(RuntimeError):
        await exporter.export([push(PRODUCER_PUSH.read_bytes())])
    with pytest.raises(RuntimeError):
        await exporter.start()


async def test_export_before_start_is_refused(tmp_path: Path) -> None:
    exporter = JsonlExporter({"path": str(tmp_path / "o.jsonl")})
    with pytest.raises(RuntimeError, match="before start"):
        await exporter.export([push(PRODUCER_PUSH.read_bytes())])


async def test_undecodable_payloads_are_skipped_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = JsonlExporter({"path": str(tmp_path / "o.jsonl")})
    await exporter.start()
    await exporter.export([push(b"\xff\xff", offset=5), push(PRODUCER_PUSH.read_bytes(), offset=6)])
    await exporter.close()
    assert len(read_lines(tmp_path / "o.jsonl")) == 10
    assert exporter.stats.undecodable_payloads == 1
    assert exporter.stats.undecodable_offsets == [5]
    assert any("offsets [5]" in record.getMessage() for record in caplog.records)


async def test_a_failed_write_is_transient_and_leaves_no_partial_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "o.jsonl"
    exporter = JsonlExporter({"path": str(out)})
    await exporter.start()
    batch = [push(PRODUCER_PUSH.read_bytes(), offset=1)]
    await exporter.export(batch)
    size = out.stat().st_size

    import exporters.jsonl as jsonl_module  # noqa: PLC0415

    def half_then_fail(file: Any, data: bytes) -> None:
        file.write(data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jsonl_module, "_write_all", half_then_fail)
    with pytest.raises(TransientExportError, match="No space left"):
        await exporter.export(batch)
    assert out.stat().st_size == size
    monkeypatch.undo()
    await exporter.export(batch)
    await exporter.close()
    assert len(read_lines(out)) == 20


async def test_export_does_not_block_the_event_loop(tmp_path: Path) -> None:
    exporter = JsonlExporter({"path": str(tmp_path / "o.jsonl")})
    await exporter.start()
    batch = [push(CONSUMER_PUSH.read_bytes(), offset=i) for i in range(400)]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await exporter.export(batch)
    task.cancel()
    await exporter.close()
    assert ticks > 1  # the loop kept running while the batch was written
