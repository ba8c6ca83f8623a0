"""A real crash: SIGKILL a process that is appending, then check every acknowledgement.

SIGKILL leaves the page cache intact, so this exercises process crashes at
arbitrary points (mid-group, mid-roll, mid-positions-write) rather than power
loss; power loss is what the fsync ordering in ``writer.py`` is for.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporters.api import LoggedPush
from telemetry.ingest import IngestLog
from tests.telemetry.ingest.crash_writer import CONFIG, crash_context, crash_payload

HELPER = Path(__file__).with_name("crash_writer.py")
# The child must run this checkout's code, whatever the installed package points at.
REPO_ROOT = Path(__file__).resolve().parents[3]
MAX_APPENDS = 200_000
RUN_SECONDS = 1.5
START_TIMEOUT_SECONDS = 20.0


def _run_and_kill(directory: Path, *extra: str) -> dict[int, int]:
    """Start the writer, SIGKILL it mid-stream; return the acknowledged ``offset -> seq``."""
    proc = subprocess.Popen(
        [sys.executable, str(HELPER), str(directory), str(MAX_APPENDS), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        },
    )
    assert proc.stdout is not None
    output = bytearray()
    try:
        # Wait for the first acknowledgement (interpreter start-up can be slow
        # on a loaded machine), then let it run for a bounded time.
        start_deadline = time.monotonic() + START_TIMEOUT_SECONDS
        kill_at: float | None = None
        while True:
            now = time.monotonic()
            if (kill_at is not None and now >= kill_at) or proc.poll() is not None:
                break
            assert now < start_deadline or kill_at is not None, "writer never acknowledged"
            ready, _, _ = select.select([proc.stdout], [], [], 0.05)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:  # the writer died (tear mode kills itself)
                    break
                output += chunk
                if kill_at is None:
                    kill_at = time.monotonic() + RUN_SECONDS
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        rest, errors = proc.communicate(timeout=10)
        output += rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, errors.decode(errors="replace")
    acknowledged: dict[int, int] = {}
    for line in bytes(output).split(b"\n")[:-1]:  # the last piece may be cut short
        offset, seq = line.split()
        acknowledged[int(offset)] = int(seq)
    return acknowledged


def _expected(offset: int, seq: int) -> LoggedPush:
    ctx = crash_context(seq)
    return LoggedPush(
        offset=offset,
        client_instance_id=ctx.client_instance_id,
        subscription_id=ctx.subscription_id,
        client_id=ctx.client_id,
        client_software_name=None,
        client_software_version=None,
        client_source_address=None,
        client_source_port=None,
        principal=None,
        received_time_ms=ctx.received_time_ms,
        push_interval_ms=ctx.push_interval_ms,
        terminating=False,
        content_type="OTLP",
        payload=crash_payload(seq),
        received_bytes=len(crash_payload(seq)),
        decoded_bytes=len(crash_payload(seq)),
    )


async def _check(directory: Path, acknowledged: dict[int, int]) -> int:
    """Assert every acknowledged record is intact; return the bytes recovery cut."""
    assert len(acknowledged) > 100, "too few appends to mean anything"
    log = await IngestLog.open(directory, CONFIG)
    try:
        assert log.log_end > max(acknowledged)
        records: dict[int, LoggedPush] = {}
        position = min(acknowledged)
        while batch := log.read(position, max_records=5000, max_bytes=16 << 20):
            records.update((r.offset, r) for r in batch)
            position = batch[-1].offset + 1
        assert position == log.log_end
        for offset, seq in acknowledged.items():
            assert offset in records, f"acknowledged offset {offset} lost"
            assert records[offset] == _expected(offset, seq), f"offset {offset} damaged"
        return log.stats.recovery_truncated_bytes
    finally:
        await log.close()


async def test_every_acknowledged_append_survives_sigkill(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Killed from outside at an arbitrary moment, twice (the second run
    # starts by recovering from the first kill).
    await _check(tmp_path, _run_and_kill(tmp_path))
    await _check(tmp_path, _run_and_kill(tmp_path))
    # Killed from inside halfway through a group's write: a torn tail on disk.
    acknowledged = _run_and_kill(tmp_path, "60")
    with caplog.at_level(logging.WARNING, logger="telemetry.ingest.recovery"):
        truncated = await _check(tmp_path, acknowledged)
    assert truncated > 0
    assert "torn record" in caplog.text
    # And the log goes on from there.
    await _check(tmp_path, _run_and_kill(tmp_path))
