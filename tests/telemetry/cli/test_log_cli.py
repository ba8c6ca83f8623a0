"""``kip714 log status|skip`` on a real log with a damaged segment, and beside a real server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

from telemetry.cli import log as log_cli
from telemetry.ingest import IngestLog, LogCorruptionError
from telemetry.ingest.positions import FILE_NAME
from tests.telemetry.ingest.support import SMALL, context
from tests.telemetry.kafka_wire_client import otlp_payload
from tests.telemetry.serve_process import ServeProcess
from tests.telemetry.server_support import exported_rows

if TYPE_CHECKING:
    from pathlib import Path

RECORDS = 40
JSONL_CONFIG = """
[subscriptions.all]
metrics = ["*"]
[exporters.landing]  # only the exporters under test
enabled = false
[exporters.lines]
type = "jsonl"
[exporters.lines.options]
path = "{out}/kip714.jsonl"
"""


def kip714_log(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "telemetry", "log", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def _write_log(log_dir: Path) -> None:
    log = await IngestLog.open(log_dir, SMALL)
    try:
        await log.register("exporter:lines")
        await log.register("exporter:audit")
        for seq in range(RECORDS):
            await log.append(context(seq), otlp_payload(f"logcli.m{seq}", points=4))
        await log.commit("exporter:audit", 10)
    finally:
        await log.close()


async def _first_corruption(log_dir: Path) -> LogCorruptionError:
    """Read the log from its start the way an exporter does, until it stops."""
    log = await IngestLog.open(log_dir, SMALL)
    try:
        position = 0
        for _ in range(RECORDS):
            batch = await asyncio.to_thread(log.read, position, 5)
            assert batch, "the reader got past the damage"
            position = batch[-1].offset + 1
    except LogCorruptionError as error:
        return error
    finally:
        await log.close()
    raise AssertionError("no corruption found")


def damaged_log(data_dir: Path) -> tuple[LogCorruptionError, list[Path]]:
    """40 records over several small segments; one byte flipped in the third segment."""
    log_dir = data_dir / "log"
    asyncio.run(_write_log(log_dir))
    segments = sorted(log_dir.glob("*.log"))
    assert len(segments) >= 5
    damaged = bytearray(segments[2].read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    segments[2].write_bytes(bytes(damaged))
    return asyncio.run(_first_corruption(log_dir)), segments


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
    }


def test_status_reports_segments_positions_lag_and_the_damaged_range(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    error, segments = damaged_log(data_dir)
    assert error.next_readable_offset is not None
    leftover = data_dir / "log" / (FILE_NAME + ".tmp")
    leftover.write_text("a save that crashed before its rename")
    before = snapshot(data_dir)

    result = kip714_log("status", "--data-dir", str(data_dir), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    text = kip714_log("status", "--data-dir", str(data_dir))
    assert text.returncode == 0, text.stderr

    assert snapshot(data_dir) == before  # nothing written, nothing removed, no lock file
    assert report["held_by_pid"] is None
    assert [s["file"] for s in report["segments"]] == [p.name for p in segments]
    assert [s["size"] for s in report["segments"]] == [p.stat().st_size for p in segments]
    assert [s["base"] for s in report["segments"]] == [int(p.stem) for p in segments]
    assert report["log_start"] == 0
    assert report["log_end"] == RECORDS
    assert report["consumers"] == [
        {"name": "exporter:audit", "exporter": "audit", "position": 10, "lag": RECORDS - 10},
        {"name": "exporter:lines", "exporter": "lines", "position": 0, "lag": RECORDS},
    ]
    # The same range the log's own reader stops at.
    (damage,) = report["damage"]
    assert damage["segment"] == segments[2].name == error.path.name
    assert damage["first_offset"] == error.offset
    assert damage["byte"] == error.position
    assert damage["next_readable_offset"] == error.next_readable_offset == int(segments[3].stem)
    assert damage["reason"] == error.reason

    lines = text.stdout.splitlines()
    assert f"log start 0, log end {RECORDS}" in lines
    assert f"  exporter:lines  position 0  lag {RECORDS}" in lines
    assert "damaged ranges: 1" in lines
    assert (
        f"  offsets {error.offset}..{error.next_readable_offset - 1} in {segments[2].name} "
        f"at byte {error.position}: {error.reason}"
    ) in lines
    assert any(
        line.endswith(
            f"kip714 log skip --data-dir {data_dir} --exporter NAME "
            f"--to {error.next_readable_offset}"
        )
        for line in lines
    )


def jsonl_offsets(out: Path) -> set[int]:
    return {row["push_offset"] for row in exported_rows(out / "kip714.jsonl")}


def test_skip_moves_the_position_and_a_restarted_server_resumes_from_it(tmp_path: Path) -> None:
    data_dir, out = tmp_path / "data", tmp_path / "out"
    error, _ = damaged_log(data_dir)
    target = error.next_readable_offset
    assert target is not None

    moved = kip714_log(
        "skip", "--data-dir", str(data_dir), "--exporter", "lines", "--to", str(target)
    )
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == (
        f"exporter lines: committed position 0 -> {target} "
        f"(offsets 0..{target - 1} will not be exported)"
    )
    positions = json.loads((data_dir / "log" / FILE_NAME).read_text())["consumers"]
    assert positions == {"exporter:audit": 10, "exporter:lines": target}

    server = ServeProcess(data_dir, JSONL_CONFIG.format(out=out)).start()
    try:
        deadline = time.monotonic() + 30
        while jsonl_offsets(out) != set(range(target, RECORDS)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.stop() == 0
    finally:
        server.kill()
    assert jsonl_offsets(out) == set(range(target, RECORDS))
    assert not any("corruption" in line for line in server.lines)


@pytest.mark.parametrize(
    ("exporter", "offset", "message"),
    [
        ("nope", "5", "exporter 'nope' has no position in {log} (registered: audit, lines)"),
        ("lines", "41", "offset 41 is outside the log's range [0, 40]"),
        ("lines", "-1", "offset -1 is outside the log's range [0, 40]"),
        ("lines", "{inside}", "offset {inside} is inside the damaged range starting at"),
    ],
)
def test_skip_refuses_what_the_log_cannot_honour(
    tmp_path: Path, exporter: str, offset: str, message: str
) -> None:
    data_dir = tmp_path / "data"
    error, _ = damaged_log(data_dir)
    positions = (data_dir / "log" / FILE_NAME).read_bytes()
    inside = str(error.offset)
    result = kip714_log(
        "skip",
        "--data-dir",
        str(data_dir),
        "--exporter",
        exporter,
        "--to",
        offset.format(inside=inside),
    )
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    expected = message.format(log=data_dir / "log", inside=inside)
    assert line.startswith(f"kip714 log skip: {expected}"), line
    assert (data_dir / "log" / FILE_NAME).read_bytes() == positions


def test_skip_is_refused_while_a_server_holds_the_directory(tmp_path: Path) -> None:
    data_dir, out = tmp_path / "data", tmp_path / "out"
    server = ServeProcess(data_dir, JSONL_CONFIG.format(out=out)).start()
    try:
        assert server.process is not None
        positions = (data_dir / "log" / FILE_NAME).read_bytes()
        refused = kip714_log(
            "skip", "--data-dir", str(data_dir), "--exporter", "lines", "--to", "0"
        )
        status = kip714_log("status", "--data-dir", str(data_dir), "--json")
        assert server.stop() == 0
    finally:
        server.kill()
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert line == (
        f"kip714 log skip: data directory {data_dir} is in use by another kip714 "
        f"(pid {server.process.pid})"
    )
    assert (data_dir / "log" / FILE_NAME).read_bytes() == positions
    # status works beside the server and says who holds the directory.
    assert status.returncode == 0, status.stderr
    report: dict[str, Any] = json.loads(status.stdout)
    assert report["held_by_pid"] == server.process.pid
    assert [c["name"] for c in report["consumers"]] == ["exporter:lines"]


def test_errors_are_one_line_with_status_2(tmp_path: Path) -> None:
    missing = kip714_log("status", "--data-dir", str(tmp_path / "nothing"))
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"kip714 log status: no ingest log at {tmp_path}/nothing/log"
    assert not (tmp_path / "nothing").exists()
    log_dir = tmp_path / "bad" / "log"
    log_dir.mkdir(parents=True)
    (log_dir / FILE_NAME).write_text("{not json")
    unreadable = kip714_log("status", "--data-dir", str(tmp_path / "bad"))
    assert unreadable.returncode == 2
    (line,) = unreadable.stderr.strip().splitlines()
    assert line.startswith("kip714 log status: ") and "unreadable consumer positions" in line


def test_a_torn_tail_is_reported_as_what_recovery_will_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    log_dir = data_dir / "log"
    asyncio.run(_write_log(log_dir))
    last = sorted(log_dir.glob("*.log"))[-1]
    size = last.stat().st_size
    with last.open("ab") as file:
        file.write(b"\x00" * 100)  # a zero-filled tail, as a crash mid-write leaves
    before = snapshot(data_dir)

    assert log_cli.main(["status", "--data-dir", str(data_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)

    assert snapshot(data_dir) == before
    (damage,) = report["damage"]
    assert damage["segment"] == last.name
    assert damage["byte"] == size
    assert damage["bytes_after"] == 100
    assert damage["next_readable_offset"] is None
    assert "zero-filled tail" in damage["reason"]
    assert report["log_end"] == RECORDS  # nothing acknowledged is lost by the cut
    # Opening the log cuts exactly that tail.
    asyncio.run(_open_and_read_everything(log_dir))
    assert last.stat().st_size == size


async def _open_and_read_everything(log_dir: Path) -> None:
    log = await IngestLog.open(log_dir, SMALL)
    try:
        assert log.log_end == RECORDS
        assert len(await asyncio.to_thread(log.read, 0, RECORDS)) == RECORDS
    finally:
        await log.close()
