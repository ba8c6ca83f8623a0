"""The jsonl exporter on a disk that fills up and frees again: no torn or padded lines."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from exporters.api import TransientExportError
from exporters.jsonl import JsonlExporter
from tests.exporters.support import PRODUCER_PUSH, push
from tests.telemetry.tiny_fs import fill, tiny_fs

if TYPE_CHECKING:
    from pathlib import Path


async def test_failed_writes_on_a_full_disk_leave_only_whole_lines(tmp_path: Path) -> None:
    data = PRODUCER_PUSH.read_bytes()
    with tiny_fs(tmp_path / "fs", 128 * 1024) as fs:
        exporter = JsonlExporter({"path": str(fs / "out.jsonl")})
        await exporter.start()
        try:
            await exporter.export([push(data, offset=0)])
            filler = fill(fs)
            for attempt in range(3):  # partial writes, then none at all
                with pytest.raises(TransientExportError, match="No space left"):
                    await exporter.export([push(data, offset=1 + attempt)])
            filler.unlink()
            await exporter.export([push(data, offset=9)])
            await exporter.flush()
        finally:
            await exporter.close()
        lines = (fs / "out.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b""
    offsets = [json.loads(line)["push_offset"] for line in lines[:-1]]
    assert offsets == [0] * 10 + [9] * 10
