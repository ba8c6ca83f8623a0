"""One committer for the fleet, in-process: file sets, contiguity, zombie committers, new clusters.

The landings publish into a list here instead of the control topic, and the
test plays the committer (``telemetry.server.fleet_commits`` does it with a
consumer group on a real broker: ``tests/kafka/test_kafka_landing.py``), so
each anchor failure of Apache Iceberg's Kafka Connect sink is exact:
#17551 (a zombie committer re-committing an old control offset) and #16360
(a recreated cluster whose offsets restart below the stored ones).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from exporters.iceberg import IcebergExporter, commits
from exporters.iceberg.fleet import (
    ControlRange,
    FileSet,
    FileSetError,
    FleetBatch,
    FleetChain,
    SetFile,
)
from exporters.iceberg.lake import open_catalog
from exporters.iceberg.lanes import ProcessLane
from tests.exporters.lake_support import table_rows
from tests.exporters.support import PRODUCER_PUSH, push

if TYPE_CHECKING:
    from pathlib import Path

    from exporters.api import LoggedPush

PAYLOAD = PRODUCER_PUSH.read_bytes()
CONTROL = "control-1"


def pushes(partition: int, offsets: range) -> list[LoggedPush]:
    return [push(PAYLOAD, offset=o, partition=partition) for o in offsets]


class Published(list[bytes]):
    """The control topic, as far as one test needs it: the records in order."""

    async def __call__(self, value: bytes) -> None:
        self.append(value)


def worker(
    root: Path, node: str, control: Published, topic_id: str = "topic-1", workers: int = 0
) -> IcebergExporter:
    exporter = IcebergExporter(
        {"path": str(root), "node_id": node, "workers": workers, "max_file_age_s": 3600}
    )
    exporter.use_fleet(control)
    exporter.bind_topic("cluster-1", "_kip714_pushes", topic_id)
    return exporter


def landed(root: Path) -> Counter[tuple[int, int]]:
    rows = table_rows(root, ["log_partition", "push_offset"])
    return Counter((r["log_partition"], r["push_offset"]) for r in rows)


def snapshot_props(exporter: IcebergExporter) -> dict[str, str]:
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    return dict(snapshot.summary.additional_properties)


def test_file_sets_round_trip_and_bad_records_are_refused() -> None:
    file_set = FileSet(
        "s1", "node-a", "topic-1", {0: (None, 5), 3: (10, 12)}, (SetFile("metrics", "f", 9),), "ns"
    )
    assert FileSet.decode(file_set.encode()) == file_set
    for bad in (b"", b"{}", b"[1]", b'{"v": 2}', b"\xff", file_set.encode()[:-3]):
        with pytest.raises(FileSetError):
            FileSet.decode(bad)
    backwards = json.loads(file_set.encode())
    backwards["ranges"] = {"0": [5, 5]}
    with pytest.raises(FileSetError, match="range"):
        FileSet.decode(json.dumps(backwards).encode())


def test_the_committer_accepts_only_sets_that_continue_the_table() -> None:
    batch = FleetBatch("topic-1", {0: 10})

    def file_set(
        name: str, ranges: dict[int, tuple[int | None, int]], topic: str = "topic-1"
    ) -> FileSet:
        return FileSet(name, "n", topic, ranges, ())

    assert batch.offer(file_set("a", {0: (10, 20), 1: (None, 4)}))
    assert not batch.offer(file_set("stale", {0: (10, 15)}))  # a stale worker's
    assert batch.offer(file_set("b", {0: (20, 30)}))
    assert not batch.offer(file_set("other topic", {0: (30, 31)}, topic="topic-0"))
    assert not batch.offer(file_set("skips", {1: (5, 9)}))  # a gap: 4 is not 5
    assert [s.set_id for s in batch.accepted] == ["a", "b"]
    assert batch.view == {0: 30, 1: 4}
    assert batch.dropped == 3


def test_a_workers_chain_follows_the_table_and_sees_a_dropped_set() -> None:
    chain = FleetChain()
    assert chain.start_of(0, 10) == 10
    chain.published("s1", {0: (10, 20)}, now=1.0)
    chain.published("s2", {0: (20, 30), 1: (None, 3)}, now=2.0)
    assert chain.start_of(0, 10) == 30
    assert chain.judge({0: 10}, [0, 1]) is None  # nothing committed yet
    assert chain.oldest() == 1.0
    assert chain.judge({0: 20}, [0, 1]) is None  # s1 committed
    assert chain.oldest() == 2.0
    assert chain.judge({0: 30, 1: 3}, [0, 1]) is None
    assert chain.pending == []
    chain.published("s3", {0: (30, 40)}, now=3.0)
    broken = chain.judge({0: 35}, [0])  # another node's set went in instead
    assert broken is not None
    assert "partition 0" in broken


async def test_workers_publish_and_one_commit_adds_every_contiguous_set(tmp_path: Path) -> None:
    control = Published()
    a, b = worker(tmp_path, "a", control), worker(tmp_path, "b", control)
    await a.start()
    await b.start()
    await a.assign([0])
    await b.assign([1])
    await a.export(pushes(0, range(5)))
    await a.flush()
    await b.export(pushes(1, range(3)))
    await b.flush()
    await a.export(pushes(0, range(5, 8)))
    await a.flush()
    assert len(control) == 3
    assert not landed(tmp_path)  # published, not committed: nothing readable yet
    state = await a.fleet_state(CONTROL)
    assert (state.offsets, state.control_offset, state.last_commit_ms) == ({}, None, None)
    batch = FleetBatch("topic-1", dict(state.offsets))
    assert all(batch.offer(FileSet.decode(record)) for record in control)
    outcome = await a.commit_fleet(batch.accepted, ControlRange(CONTROL, None, len(control)))
    assert (len(outcome.added), outcome.dropped, outcome.error) == (3, (), None)
    props = snapshot_props(a)
    assert props[commits.CONTROL_OFFSET] == "3"
    assert props[commits.FILE_SETS] == "3"
    assert json.loads(props[commits.TOPIC_OFFSETS]) == {"0": 8, "1": 3}
    # Each worker sees its sets in the table: its durable offsets advance.
    await a._read_fleet()
    await b._read_fleet()
    assert a.durable_offsets() == {0: 8}
    assert b.durable_offsets() == {1: 3}
    assert a.file_sets_waiting == b.file_sets_waiting == 0
    await a.close()
    await b.close()
    counts = landed(tmp_path)
    assert sorted(counts) == [(0, o) for o in range(8)] + [(1, o) for o in range(3)]
    assert len(set(counts.values())) == 1


async def test_a_zombie_committer_commits_nothing_apache_iceberg_17551(tmp_path: Path) -> None:
    control = Published()
    a = worker(tmp_path, "a", control)
    await a.start()
    await a.assign([0])
    await a.export(pushes(0, range(5)))
    await a.flush()
    first = [FileSet.decode(r) for r in control]
    # Two committers read the table before either committed (the zombie's session expired
    # unnoticed): the live one commits the set; the zombie's later commit of the same
    # control range is fenced, and so is one from an older control offset (whose records
    # retention may have removed meanwhile).
    live = await a.commit_fleet(first, ControlRange(CONTROL, None, 1))
    assert live.added and not live.fenced
    zombie = await a.commit_fleet(first, ControlRange(CONTROL, None, 1))
    assert zombie.fenced
    assert "control offset is 1" in (zombie.error or "")
    await a.export(pushes(0, range(5, 9)))
    await a.flush()
    second = [FileSet.decode(control[1])]
    assert (await a.commit_fleet(second, ControlRange(CONTROL, 1, 2))).added
    old = await a.commit_fleet(second, ControlRange(CONTROL, 1, 2))
    assert old.fenced
    await a.close()
    counts = landed(tmp_path)
    assert sorted(counts) == [(0, o) for o in range(9)]
    assert len(set(counts.values())) == 1


async def test_a_recreated_cluster_starts_from_its_own_offsets_apache_iceberg_16360(
    tmp_path: Path,
) -> None:
    old_control, new_control = Published(), Published()
    old = worker(tmp_path, "a", old_control, topic_id="old-topic")
    await old.start()
    await old.assign([0])
    await old.export(pushes(0, range(40)))
    await old.flush()
    sets = [FileSet.decode(r) for r in old_control]
    assert (await old.commit_fleet(sets, ControlRange("old-control", None, 5))).added
    await old.close()
    # The cluster is recreated: new topic ids, offsets from 0 again, below the stored 40 and 5.
    new = worker(tmp_path, "b", new_control, topic_id="new-topic")
    await new.start()
    assert await new.assign([0]) == {0: None}
    await new.export(pushes(0, range(3)))
    await new.flush()
    state = await new.fleet_state("new-control")
    assert (state.offsets, state.control_offset) == ({}, None)
    batch = FleetBatch("new-topic", dict(state.offsets))
    assert batch.offer(FileSet.decode(new_control[0]))
    outcome = await new.commit_fleet(batch.accepted, ControlRange("new-control", None, 1))
    assert outcome.added
    await new.close()
    counts = landed(tmp_path)
    assert [counts[(0, o)] for o in range(3)] == [2 * counts[(0, 10)]] * 3  # both landed


async def test_a_worker_whose_set_was_dropped_feeds_again_from_the_table(tmp_path: Path) -> None:
    control = Published()
    a, b = worker(tmp_path, "a", control), worker(tmp_path, "b", control)
    await a.start()
    await b.start()
    await a.assign([0])
    await b.assign([0])  # b is stale: a holds the partition now
    await a.export(pushes(0, range(5)))
    await a.flush()
    await b.export(pushes(0, range(3)))
    await b.flush()
    batch = FleetBatch("topic-1", {})
    verdicts = [batch.offer(FileSet.decode(r)) for r in control]
    assert verdicts == [True, False]
    assert (await a.commit_fleet(batch.accepted, ControlRange(CONTROL, None, 2))).added
    await b._read_fleet()
    assert b.stats.file_set_chains_dropped == 1
    assert b.take_replay() is not None  # the host seeks to where the table stands
    assert b.resume_offsets() == {0: 5}
    await a.close()
    await b.close()
    counts = landed(tmp_path)
    assert sorted(counts) == [(0, o) for o in range(5)]
    assert len(set(counts.values())) == 1


async def test_an_idle_committer_whose_worker_died_commits_through_a_new_one(
    tmp_path: Path,
) -> None:
    """The OOM killer takes the committer node's first worker while it lands nothing itself:
    the committer's next call replaces the lanes (no push needs to arrive first)."""
    control = Published()
    committer, other = (
        worker(tmp_path, "committer", control, workers=1),
        worker(tmp_path, "other", control),
    )
    await committer.start()
    await other.start()
    await other.assign([0])
    await other.export(pushes(0, range(4)))
    await other.flush()
    first = committer._lanes[0]
    assert isinstance(first, ProcessLane)
    first._handle.process.kill()  # SIGKILL, as the OOM killer sends
    await asyncio.to_thread(first._handle.process.join, 10)
    assert first.failed
    state = await committer.fleet_state(CONTROL)
    batch = FleetBatch("topic-1", dict(state.offsets))
    assert all(batch.offer(FileSet.decode(record)) for record in control)
    outcome = await committer.commit_fleet(batch.accepted, ControlRange(CONTROL, None, 1))
    assert (len(outcome.added), outcome.error) == (1, None)
    assert committer._lanes[0] is not first
    await committer.close()
    await other.close()
    assert sorted(landed(tmp_path)) == [(0, o) for o in range(4)]
