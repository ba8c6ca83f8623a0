"""The frame length is checksummed: damage before intact frames is never a torn tail.

Also: stores written in format 1 (length outside the checksum) are read and
rewritten in format 2 at open, the old files kept beside until the next snapshot.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from telemetry.metastore import ConfigRecord, MetadataCorruptionError, MetadataStore
from telemetry.metastore.frames import FILE_MAGIC, HEAD
from telemetry.metastore.records import encode_batch


def _config(name: str) -> ConfigRecord:
    return ConfigRecord(resource_type=16, resource_name=name, name="metrics", value="*")


def _three_frames(data_dir: Path) -> tuple[Path, list[int]]:
    """A segment holding three acknowledged frames; return it and each frame's position."""
    positions = []
    with MetadataStore.open(data_dir) as store:
        segment = data_dir / "meta" / "00000000000000000000.log"
        for name in ("a", "b", "c"):
            positions.append(segment.stat().st_size)
            store.append([_config(name)])
    return segment, positions


@pytest.mark.parametrize("bit", [0, 9, 22])
def test_a_flipped_length_bit_before_intact_frames_refuses_to_open(
    tmp_path: Path, bit: int
) -> None:
    segment, positions = _three_frames(tmp_path)
    data = bytearray(segment.read_bytes())
    data[positions[0] + bit // 8] ^= 1 << (bit % 8)  # inside frame 1's length field
    segment.write_bytes(bytes(data))
    with pytest.raises(MetadataCorruptionError) as raised:
        MetadataStore.open(tmp_path)
    message = str(raised.value)
    assert str(segment) in message
    assert f"at byte {positions[0]}" in message
    assert f"intact frame at byte {positions[1]}" in message
    assert segment.read_bytes() == bytes(data)  # not one byte cut


def test_a_damaged_last_frame_is_a_torn_tail(tmp_path: Path) -> None:
    segment, positions = _three_frames(tmp_path)
    data = bytearray(segment.read_bytes())
    data[positions[2] + 1] ^= 0x40  # the last frame's length
    segment.write_bytes(bytes(data))
    with MetadataStore.open(tmp_path) as store:
        assert set(store.image.client_metrics) == {"a", "b"}
    assert segment.stat().st_size == positions[2]


def test_a_flipped_header_checksum_before_intact_frames_refuses_to_open(tmp_path: Path) -> None:
    segment, positions = _three_frames(tmp_path)
    data = bytearray(segment.read_bytes())
    data[positions[1] + HEAD.size - 1] ^= 0x80
    segment.write_bytes(bytes(data))
    with pytest.raises(MetadataCorruptionError, match="not a torn write"):
        MetadataStore.open(tmp_path)
    assert segment.read_bytes() == bytes(data)


def test_the_server_stops_at_start_with_exit_2_and_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    segment, positions = _three_frames(data_dir)
    data = bytearray(segment.read_bytes())
    data[positions[0] + 2] ^= 0x01
    segment.write_bytes(bytes(data))
    command = [
        sys.executable, "-m", "telemetry", "serve", "--data-dir", str(data_dir),
        "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
    ]  # fmt: skip
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(segment) in lines[0]
    assert f"at byte {positions[0]}" in lines[0]
    assert segment.read_bytes() == bytes(data)


def test_a_format_1_store_is_read_and_rewritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    meta = tmp_path / "meta"
    meta.mkdir()
    snapshot = encode_batch(2, (_config("a"), _config("b")))
    (meta / "00000000000000000002.checkpoint").write_bytes(snapshot)
    old_segment = encode_batch(2, (_config("c"),)) + encode_batch(3, (_config("d"),))
    (meta / "00000000000000000002.log").write_bytes(old_segment)
    with caplog.at_level(logging.WARNING, "telemetry.metastore.store"):
        store = MetadataStore.open(tmp_path, snapshot_interval_records=2)
    assert "rewritten in format 2" in caplog.text
    assert set(store.image.client_metrics) == {"a", "b", "c", "d"}
    assert store.next_offset == 4
    names = sorted(path.name for path in meta.iterdir())
    assert names == [
        "00000000000000000002.checkpoint.v1",
        "00000000000000000002.log.v1",
        "00000000000000000004.checkpoint",
        "00000000000000000004.log",
    ]
    assert (meta / "00000000000000000002.log.v1").read_bytes() == old_segment
    assert (meta / "00000000000000000004.checkpoint").read_bytes().startswith(FILE_MAGIC)
    store.append([_config("e")])
    store.close()
    with MetadataStore.open(tmp_path, snapshot_interval_records=2) as reopened:
        assert set(reopened.image.client_metrics) == {"a", "b", "c", "d", "e"}
        reopened.append([_config("f")])  # the second record since the rewrite: a snapshot
    assert not list(meta.glob("*.v1"))
    with MetadataStore.open(tmp_path) as again:
        assert set(again.image.client_metrics) == {"a", "b", "c", "d", "e", "f"}
        assert again.next_offset == 6


def test_a_format_1_torn_tail_is_still_cut_before_the_rewrite(tmp_path: Path) -> None:
    meta = tmp_path / "meta"
    meta.mkdir()
    intact = encode_batch(0, (_config("a"),))
    (meta / "00000000000000000000.log").write_bytes(intact + encode_batch(1, (_config("b"),))[:-3])
    with MetadataStore.open(tmp_path) as store:
        assert set(store.image.client_metrics) == {"a"}
        assert store.next_offset == 1
    assert (meta / "00000000000000000000.log.v1").read_bytes() == intact
