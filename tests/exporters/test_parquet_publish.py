"""The publish protocol crashed at every step and recovered: no loss, duplicate or half file."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from durable.fs import make_dirs
from exporters.parquet import publish
from exporters.parquet.worker import WorkerConfig, WorkerLanding
from tests.exporters.parquet_support import every_file_reads, land_async, read_rows
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, push

if TYPE_CHECKING:
    from pathlib import Path

    from exporters.api import LoggedPush

PRODUCER_ROWS, CONSUMER_ROWS = 10, 15


def pushes(first: int, count: int) -> list[LoggedPush]:
    data = (PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes())
    return [push(data[i % 2], offset=first + i) for i in range(count)]


def rows_for(count: int) -> int:
    return sum(PRODUCER_ROWS if i % 2 == 0 else CONSUMER_ROWS for i in range(count))


def stage(root: Path, first: int, count: int, *, raw: bool = True) -> publish.Manifest:
    """Step 1 for pushes first.., by two in-process workers; returns the manifest to publish."""
    publish.prepare(root)
    files = []
    batch = pushes(first, count)
    for worker_id, part in enumerate((batch[: count // 2], batch[count // 2 :])):
        landing = WorkerLanding(WorkerConfig(str(root), worker_id, f"t{first}", raw, None, 1000))
        landing.batch(part)
        files += landing.seal(first, first + count - 1)
    return publish.Manifest(first, first + count - 1, tuple(files))


def published(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet") if "_landing" not in p.parts)


def staged(root: Path) -> list[Path]:
    return sorted(publish.staging_dir(root).iterdir())


def test_a_clean_publication_moves_every_file_and_keeps_one_manifest(tmp_path: Path) -> None:
    manifest = stage(tmp_path, 0, 4)
    assert len(manifest.files) == 4  # metrics + pushes, from each of two workers
    publish.publish(tmp_path, manifest)
    assert not staged(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in published(tmp_path)] == sorted(
        f.final for f in manifest.files
    )
    later = stage(tmp_path, 4, 2)
    publish.publish(tmp_path, later)
    assert [p.name for p in publish.manifest_dir(tmp_path).iterdir()] == [later.name]
    assert publish.recover(tmp_path).durable_offset == 6
    assert every_file_reads(tmp_path) == rows_for(4) + 4 + rows_for(2) + 2


def test_crash_after_staging_discards_the_uncommitted_generation(tmp_path: Path) -> None:
    stage(tmp_path, 0, 4)  # no manifest: the crash came before the commit point
    recovery = publish.recover(tmp_path)
    assert (recovery.durable_offset, recovery.discarded, recovery.manifests) == (0, 4, 0)
    assert not staged(tmp_path)
    assert not published(tmp_path)


def test_crash_with_a_half_written_manifest_discards_the_generation(tmp_path: Path) -> None:
    manifest = stage(tmp_path, 0, 4)
    tmp = publish.manifest_dir(tmp_path) / (manifest.name + ".tmp")
    tmp.write_bytes(manifest.to_json()[:40])  # torn, never renamed
    recovery = publish.recover(tmp_path)
    assert recovery.durable_offset == 0
    assert not tmp.exists()
    assert not staged(tmp_path)
    assert not published(tmp_path)


@pytest.mark.parametrize("renamed", [0, 1, 3, 4])
def test_crash_after_the_manifest_rolls_forward(tmp_path: Path, renamed: int) -> None:
    manifest = stage(tmp_path, 0, 4)
    publish.write_manifest(tmp_path, manifest)
    for file in manifest.files[:renamed]:  # some renames done before the crash
        target = tmp_path / file.final
        make_dirs(target.parent)
        (publish.staging_dir(tmp_path) / file.staged).rename(target)
    recovery = publish.recover(tmp_path)
    assert recovery.durable_offset == 4
    assert recovery.rolled_forward == 4 - renamed
    assert not staged(tmp_path)
    assert len(published(tmp_path)) == 4
    # Every push's rows exactly once, every file whole.
    offsets = [r["push_offset"] for r in read_rows(tmp_path)]
    assert sorted(set(offsets)) == [0, 1, 2, 3]
    assert len(offsets) == rows_for(4)
    assert sorted(r["push_offset"] for r in read_rows(tmp_path, "pushes")) == [0, 1, 2, 3]
    assert every_file_reads(tmp_path) == rows_for(4) + 4
    # Recovery is idempotent.
    again = publish.recover(tmp_path)
    assert (again.durable_offset, again.rolled_forward, again.discarded) == (4, 0, 0)


def test_crash_before_old_manifests_are_dropped_is_harmless(tmp_path: Path) -> None:
    first = stage(tmp_path, 0, 2)
    publish.publish(tmp_path, first)
    second = stage(tmp_path, 2, 2)
    publish.write_manifest(tmp_path, second)
    publish.move_into_place(tmp_path, second)
    # Both manifests remain, as after a crash before step 4.
    (publish.manifest_dir(tmp_path) / first.name).write_bytes(first.to_json())
    recovery = publish.recover(tmp_path)
    assert recovery.durable_offset == 4
    assert recovery.rolled_forward == 0
    assert [p.name for p in publish.manifest_dir(tmp_path).iterdir()] == [second.name]
    assert len(read_rows(tmp_path)) == rows_for(2) * 2


def test_a_file_missing_from_both_places_is_reported(tmp_path: Path) -> None:
    manifest = stage(tmp_path, 0, 2)
    publish.write_manifest(tmp_path, manifest)
    (publish.staging_dir(tmp_path) / manifest.files[0].staged).unlink()
    recovery = publish.recover(tmp_path)
    assert (recovery.missing, recovery.rolled_forward, recovery.durable_offset) == (1, 3, 2)


async def test_the_exporter_rolls_forward_and_skips_what_is_published(tmp_path: Path) -> None:
    manifest = stage(tmp_path, 0, 4, raw=False)
    publish.write_manifest(tmp_path, manifest)  # crash right after the commit point
    stray = stage(tmp_path, 4, 2, raw=False)  # and a generation that never committed
    assert stray.files
    # The host had committed nothing, so it replays everything from offset 0.
    exporter = await land_async(tmp_path, [pushes(0, 3), pushes(3, 5)])
    assert exporter.stats.recovered_files == 2
    assert exporter.stats.discarded_staged_files == 2
    assert exporter.stats.replayed_pushes_skipped == 4
    offsets = [r["push_offset"] for r in read_rows(tmp_path)]
    assert sorted(set(offsets)) == list(range(8))
    assert len(offsets) == rows_for(8)
    assert not staged(tmp_path)
    assert exporter.durable_offset() == 8


def test_manifest_round_trips_and_refuses_unknown_versions() -> None:
    manifest = publish.Manifest(3, 9, (publish.PublishedFile("a.parquet.tmp", "metrics/x", 5, 7),))
    assert publish.Manifest.from_json(manifest.to_json()) == manifest
    with pytest.raises(ValueError, match="version"):
        publish.Manifest.from_json(b'{"version": 99}')
    assert asyncio.iscoroutinefunction(land_async)
