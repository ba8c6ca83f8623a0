"""The writer leaves only the newest synced bytes in the page cache, and readers never notice."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import pytest

from telemetry.ingest import IngestLog, LogConfig
from telemetry.ingest import writer as writer_module
from telemetry.ingest.stats import LogStats
from telemetry.ingest.writer import SegmentWriter
from tests.telemetry.ingest.support import SMALL, append_many, assert_matches, segment_files

if TYPE_CHECKING:
    from pathlib import Path

#: (fd, offset, length) of each POSIX_FADV_DONTNEED, in order; "sync" marks each fdatasync.
Calls = list[tuple[int, int, int] | str]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    seen: Calls = []

    def fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_DONTNEED
        os.fstat(fd)  # still open: a dropped segment's descriptor is closed only after
        seen.append((fd, offset, length))

    def datasync(fd: int) -> None:
        seen.append("sync")
        os.fdatasync(fd)

    monkeypatch.setattr(writer_module, "_fadvise", fadvise)
    monkeypatch.setattr(writer_module, "_datasync", datasync)
    return seen


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_drops_synced_bytes_beyond_the_window_in_order(tmp_path: Path, calls: Calls) -> None:
    writer = SegmentWriter(tmp_path, 0, 0, 10_000, LogStats(), page_cache_bytes=250)
    for group in range(4):
        writer.write_group([b"h" * 20, b"p" * 80], [100], group)
    # 400 bytes synced, the newest 250 kept: 150 dropped, each part after its group's sync.
    assert calls == ["sync", "sync", "sync", (calls[3][0], 0, 50), "sync", (calls[3][0], 50, 100)]
    writer.close()


def test_rolled_segments_are_dropped_then_closed(tmp_path: Path, calls: Calls) -> None:
    before = _open_fds()
    writer = SegmentWriter(tmp_path, 0, 0, 300, LogStats(), page_cache_bytes=250)
    for offset in range(15):  # 100-byte frames, three to a segment: five segments
        writer.write_group([b"h" * 20, b"p" * 80], [100], offset)
    assert len(list(tmp_path.iterdir())) == 5
    # The window holds at most three segments' descriptors, whatever was written.
    assert _open_fds() - before <= 3
    dropped: dict[int, int] = {}
    for call in calls:
        if isinstance(call, tuple):
            fd, offset, length = call
            # Contiguous from a segment's start (a closed one's number may come back).
            assert offset in (0, dropped.get(fd))
            dropped[fd] = offset + length
    # 1,500 bytes written, 250 kept.
    assert sum(c[2] for c in calls if isinstance(c, tuple)) == 1_250
    writer.close()
    assert _open_fds() == before


def test_a_reopened_segment_drops_only_what_this_writer_synced(
    tmp_path: Path, calls: Calls
) -> None:
    (tmp_path / "00000000000000000000.log").write_bytes(b"x" * 500)
    writer = SegmentWriter(tmp_path, 0, 500, 10_000, LogStats(), page_cache_bytes=0)
    writer.write_group([b"h" * 20, b"p" * 80], [100], 5)
    assert calls == ["sync", (calls[1][0], 500, 100)]
    writer.close()


async def test_readers_get_every_record_with_nothing_cached(tmp_path: Path) -> None:
    log = await IngestLog.open(tmp_path, dataclasses.replace(SMALL, page_cache_bytes=0))
    offsets = await append_many(log, range(40))
    assert len(segment_files(tmp_path)) >= 3
    records = log.read(0, max_records=100)
    assert [r.offset for r in records] == offsets
    for seq, record in enumerate(records):
        assert_matches(record, seq)
    await log.close()


def test_the_window_is_never_negative() -> None:
    with pytest.raises(ValueError, match="page_cache_bytes"):
        LogConfig(page_cache_bytes=-1)
