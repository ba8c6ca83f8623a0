"""The landing knows which ingest log fed it: a lost log is refused, or starts a new epoch."""

from __future__ import annotations

import collections
import json
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from exporters.api import LogBoundExporter
from exporters.parquet import ParquetExporter, publish
from exporters.parquet.log_epoch import LogMismatchError
from tests.exporters.parquet_support import parquet_files, read_rows
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, push, run_exporter

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from exporters.api import LoggedPush

LOG_A = str(uuid.uuid4())
LOG_B = str(uuid.uuid4())


def pushes(first: int, count: int) -> list[LoggedPush]:
    data = (PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes())
    return [push(data[i % 2], offset=first + i) for i in range(count)]


def rows_for(count: int) -> int:
    return sum(10 if i % 2 == 0 else 15 for i in range(count))


async def land_from(
    root: Path, log_id: str | None, batches: Sequence[Sequence[LoggedPush]], **options: Any
) -> ParquetExporter:
    """What the host does: bind the log (if it has an id), start, export, flush, close."""
    return await run_exporter(ParquetExporter({"path": str(root), **options}), batches, log_id)


def manifests(root: Path) -> list[dict[str, Any]]:
    directory = publish.manifest_dir(root)
    return [json.loads(p.read_bytes()) for p in sorted(directory.glob("*.json"))]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under the landing (lock file aside) with its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


def test_the_landing_is_a_log_bound_exporter() -> None:
    assert isinstance(ParquetExporter({"path": "x"}), LogBoundExporter)


async def test_a_fresh_landing_records_the_log_id_before_any_data(tmp_path: Path) -> None:
    await land_from(tmp_path, LOG_A, [])
    (manifest,) = manifests(tmp_path)
    assert (manifest["log_id"], manifest["epoch"], manifest["files"]) == (LOG_A, 0, [])
    await land_from(tmp_path, LOG_A, [pushes(0, 2)])
    (manifest,) = manifests(tmp_path)
    assert (manifest["log_id"], manifest["last_offset"]) == (LOG_A, 1)


async def test_the_same_log_resumes_and_skips_replays(tmp_path: Path) -> None:
    await land_from(tmp_path, LOG_A, [pushes(0, 4)])
    again = await land_from(tmp_path, LOG_A, [pushes(0, 6)])
    assert again.stats.replayed_pushes_skipped == 4
    offsets = [r["push_offset"] for r in read_rows(tmp_path)]
    assert len(offsets) == rows_for(6)
    assert sorted(set(offsets)) == list(range(6))


async def test_a_landing_from_before_log_ids_adopts_the_current_log(tmp_path: Path) -> None:
    await land_from(tmp_path, None, [pushes(0, 4)])
    # Rewrite the manifest exactly as version 1 wrote it: other name, no log id, no epoch.
    directory = publish.manifest_dir(tmp_path)
    (current,) = directory.glob("*.json")
    body = json.loads(current.read_bytes())
    current.unlink()
    v1 = {"version": 1, **{k: body[k] for k in ("first_offset", "last_offset", "files")}}
    (directory / "00000000000000000000-00000000000000000003.json").write_text(json.dumps(v1))
    (legacy,) = publish.read_manifests(tmp_path)
    assert (legacy.log_id, legacy.epoch, legacy.last_offset) == (None, 0, 3)
    adopted = await land_from(tmp_path, LOG_A, [pushes(0, 6)])
    assert adopted.stats.replayed_pushes_skipped == 4
    (manifest,) = manifests(tmp_path)
    assert (manifest["version"], manifest["log_id"], manifest["last_offset"]) == (2, LOG_A, 5)
    assert len(read_rows(tmp_path)) == rows_for(6)


async def test_another_log_is_refused_with_both_ids_and_nothing_changes(tmp_path: Path) -> None:
    await land_from(tmp_path, LOG_A, [pushes(0, 4)])
    # A generation staged but never published, as a crash leaves it.
    publish.staging_dir(tmp_path).joinpath("x-g000001-w0-metrics-1.parquet.tmp").write_bytes(b"x")
    before = snapshot(tmp_path)
    exporter = ParquetExporter({"path": str(tmp_path)})
    exporter.bind_log(LOG_B)
    with pytest.raises(LogMismatchError) as caught:
        await exporter.start()
    await exporter.close()
    message = str(caught.value)
    assert "\n" not in message
    assert LOG_A in message
    assert LOG_B in message
    assert "new_log_epoch = true" in message
    assert snapshot(tmp_path) == before
    # The lock was released: the right log can still start it.
    again = await land_from(tmp_path, LOG_A, [pushes(4, 1)])
    assert again.durable_offset() == 5


async def test_a_new_epoch_keeps_old_files_and_lands_the_new_log_once(tmp_path: Path) -> None:
    await land_from(tmp_path, LOG_A, [pushes(0, 4)])
    old_files = {p: p.read_bytes() for p in parquet_files(tmp_path)}
    assert old_files
    # Log B starts again at offset 0; with the option, its pushes are new data.
    first = await land_from(tmp_path, LOG_B, [pushes(0, 3)], new_log_epoch=True)
    assert first.stats.replayed_pushes_skipped == 0
    (manifest,) = manifests(tmp_path)
    assert (manifest["log_id"], manifest["epoch"], manifest["last_offset"]) == (LOG_B, 1, 2)
    # A restart of log B replays from its commit: exactly once within the new epoch,
    # whether or not the option is still set.
    second = await land_from(tmp_path, LOG_B, [pushes(0, 5)])
    assert second.stats.replayed_pushes_skipped == 3
    third = await land_from(tmp_path, LOG_B, [pushes(0, 6)], new_log_epoch=True)
    assert third.stats.replayed_pushes_skipped == 5
    for path, content in old_files.items():
        assert path.read_bytes() == content
    new_files = [p for p in parquet_files(tmp_path) if p not in old_files]
    assert new_files
    assert all(p.name.startswith("part-e000001-") for p in new_files)
    # Offsets 0..3 of log A, 0..5 of log B, each push's rows exactly once.
    offsets = collections.Counter(r["push_offset"] for r in read_rows(tmp_path))
    per_push = {o: 10 if o % 2 == 0 else 15 for o in range(6)}
    assert offsets == {o: n * (2 if o < 4 else 1) for o, n in per_push.items()}


async def test_a_host_without_log_ids_keeps_the_recorded_one(tmp_path: Path) -> None:
    await land_from(tmp_path, LOG_A, [pushes(0, 2)])
    await land_from(tmp_path, None, [pushes(2, 2)])
    (manifest,) = manifests(tmp_path)
    assert (manifest["log_id"], manifest["last_offset"]) == (LOG_A, 3)
    refused = ParquetExporter({"path": str(tmp_path)})
    refused.bind_log(LOG_B)
    with pytest.raises(LogMismatchError):
        await refused.start()
    await refused.close()


def test_manifests_round_trip_their_log_and_epoch() -> None:
    manifest = publish.Manifest(5, 9, (), LOG_A, 3)
    assert publish.Manifest.from_json(manifest.to_json()) == manifest
    assert manifest.name == "e000003-00000000000000000010.json"
    marker = publish.Manifest(0, -1, (), LOG_A, 4)
    assert marker.name == "e000004-00000000000000000000.json"
    assert max([manifest, marker], key=lambda m: m.order) is marker
