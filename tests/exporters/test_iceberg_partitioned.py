"""The Iceberg landing fed from the pushes topic, in-process: positions per partition, fencing.

What ``KafkaExporterHost`` does with a ``PartitionedExporter`` (bind the
topic, assign, export, revoke), driven by hand on a real SQL catalog so each
rebalance race is exact; ``tests/kafka/test_kafka_landing.py`` runs the same
with a real broker and ``kip714 serve`` nodes.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from exporters.api import PartitionedExporter, TransientExportError
from exporters.iceberg import IcebergExporter, commits
from exporters.iceberg.lake import open_catalog
from tests.exporters.lake_support import table_rows
from tests.exporters.support import PRODUCER_PUSH, push

if TYPE_CHECKING:
    from pathlib import Path

    from exporters.api import LoggedPush

TOPIC = "_kip714_pushes"
CLUSTER = "cluster-1"
PAYLOAD = PRODUCER_PUSH.read_bytes()


def pushes(partition: int, offsets: range) -> list[LoggedPush]:
    return [push(PAYLOAD, offset=o, partition=partition) for o in offsets]


def landing(root: Path, node: str, topic_id: str = "topic-1") -> IcebergExporter:
    # One lake under ``root`` (its SQL catalog and warehouse), shared by the nodes.
    exporter = IcebergExporter(
        {"path": str(root), "node_id": node, "workers": 0, "max_file_age_s": 3600}
    )
    assert isinstance(exporter, PartitionedExporter)
    exporter.bind_topic(CLUSTER, TOPIC, topic_id)
    return exporter


def landed(root: Path) -> Counter[tuple[int, int]]:
    """(log_partition, push_offset) -> rows, over the committed table (every node's)."""
    rows = table_rows(root, ["log_partition", "push_offset"])
    return Counter((r["log_partition"], r["push_offset"]) for r in rows)


def rows_per_push(root: Path) -> int:
    counts = set(landed(root).values())
    assert len(counts) == 1, counts
    return counts.pop()


def snapshot_offsets(exporter: IcebergExporter) -> dict[str, object]:
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    return dict(snapshot.summary.additional_properties)


async def test_offsets_per_partition_with_the_topic_id_and_a_resume_where_the_table_stands(
    tmp_path: Path,
) -> None:
    a = landing(tmp_path, "a")
    await a.start()
    assert await a.assign([0, 1]) == {0: None, 1: None}
    await a.export([*pushes(0, range(10)), *pushes(1, range(100, 105))])
    durable = await a.revoke([0, 1])
    assert durable == {0: 10, 1: 105}
    props = snapshot_offsets(a)
    await a.close()
    assert props[commits.TOPIC_ID] == "topic-1"
    assert props[commits.CLUSTER_ID] == CLUSTER
    assert props[commits.TOPIC] == TOPIC
    assert json.loads(str(props[commits.TOPIC_OFFSETS])) == {"0": 10, "1": 105}
    per_push = rows_per_push(tmp_path)
    assert sorted(landed(tmp_path)) == [(0, o) for o in range(10)] + [
        (1, o) for o in range(100, 105)
    ]
    # Another node takes partition 1 over where the table stands, and skips a replay.
    b = landing(tmp_path, "b")
    await b.start()
    assert await b.assign([1]) == {1: 105}
    await b.export(pushes(1, range(103, 108)))  # the group's offsets trail: a replay
    await b.flush()
    assert b.durable_offsets() == {1: 108}
    assert b.stats.replayed_pushes_skipped == 2
    await b.close()
    counts = landed(tmp_path)
    assert set(counts.values()) == {per_push}
    assert sorted(p for p in counts if p[0] == 1) == [(1, o) for o in range(100, 108)]
    # Partition 0's offsets survive commits of partition 1 only.
    assert json.loads(str(snapshot_offsets(b)[commits.TOPIC_OFFSETS])) == {"0": 10, "1": 108}


async def test_a_node_that_lost_its_partition_commits_nothing_of_it(tmp_path: Path) -> None:
    # A zombie: ``a`` still holds partition 0 (its revocation never came) while ``b``
    # took it over and landed further. ``a``'s generation is fenced, not committed.
    a, b = landing(tmp_path, "a"), landing(tmp_path, "b")
    await a.start()
    await b.start()
    await a.assign([0])
    await a.export(pushes(0, range(5)))
    await a.flush()
    await a.export(pushes(0, range(5, 10)))  # taken, not committed
    assert await b.assign([0]) == {0: 5}
    await b.export(pushes(0, range(5, 12)))
    await b.flush()
    with pytest.raises(TransientExportError, match="another node landed it"):
        await a.flush()
    assert a.stats.fenced_generations == 1
    assert a.take_replay() is not None  # the host seeks every partition again
    await b.close()
    await a.close()
    counts = landed(tmp_path)
    assert sorted(counts) == [(0, o) for o in range(12)]
    assert len(set(counts.values())) == 1  # each push's rows once


async def test_a_fenced_node_resumes_where_the_table_stands(tmp_path: Path) -> None:
    a, b = landing(tmp_path, "a"), landing(tmp_path, "b")
    await a.start()
    await b.start()
    await a.assign([0])
    await b.assign([0])
    await b.export(pushes(0, range(4)))
    await b.flush()
    await a.export(pushes(0, range(3)))
    with pytest.raises(TransientExportError):
        await a.flush()
    await b.close()
    # After the backoff ``a`` reads the table again: it takes offsets from 4 on only.
    for _ in range(100):
        try:
            await a.export(pushes(0, range(6)))
            break
        except TransientExportError:
            await asyncio.sleep(0.05)
    assert a.resume_offsets() == {0: 4}
    await a.flush()
    await a.close()
    assert sorted(landed(tmp_path)) == [(0, o) for o in range(6)]
    assert len(set(landed(tmp_path).values())) == 1


async def test_a_recreated_topic_starts_at_its_first_offset_not_at_the_old_ones(
    tmp_path: Path,
) -> None:
    # Apache Iceberg #16360: offsets are compared with the snapshot of the same topic id.
    old = landing(tmp_path, "a", topic_id="old-topic")
    await old.start()
    await old.assign([0])
    await old.export(pushes(0, range(50)))
    await old.close()
    new = landing(tmp_path, "a", topic_id="new-topic")
    await new.start()
    assert await new.assign([0]) == {0: None}
    await new.export(pushes(0, range(3)))
    await new.close()
    counts = landed(tmp_path)
    once = counts[(0, 10)]
    assert [counts[(0, o)] for o in range(3)] == [2 * once] * 3  # both topics' pushes landed
    props = snapshot_offsets(new)
    assert json.loads(str(props[commits.TOPIC_OFFSETS])) == {"0": 3}
    assert props[commits.TOPIC_ID] == "new-topic"


async def test_pushes_of_partitions_not_assigned_are_not_taken(tmp_path: Path) -> None:
    a = landing(tmp_path, "a")
    await a.start()
    await a.assign([0])
    await a.export([*pushes(0, range(2)), *pushes(3, range(2))])
    await a.close()
    assert sorted(landed(tmp_path)) == [(0, 0), (0, 1)]


def test_raw_pushes_are_refused_with_the_topic(tmp_path: Path) -> None:
    exporter = IcebergExporter({"path": str(tmp_path), "raw": True, "workers": 0})
    with pytest.raises(ValueError, match="raw"):
        exporter.bind_topic(CLUSTER, TOPIC, "topic-1")


def test_the_local_log_lands_a_null_partition(tmp_path: Path) -> None:
    exporter = IcebergExporter({"path": str(tmp_path), "workers": 0})

    async def run() -> None:
        exporter.bind_log("log-1")
        await exporter.start()
        await exporter.export(pushes(0, range(2)))
        await exporter.close()

    asyncio.run(run())
    rows = table_rows(tmp_path, ["log_partition", "push_offset"])
    assert rows and {r["log_partition"] for r in rows} == {None}


async def test_a_partition_behind_another_is_landed_whole(tmp_path: Path) -> None:
    # Offsets repeat across partitions: a commit of partition 0 up to offset 100 says
    # nothing about partition 1's offsets 0..4 (a process lane filters nothing).
    a = IcebergExporter({"path": str(tmp_path), "node_id": "a", "workers": 1})
    a.bind_topic(CLUSTER, TOPIC, "topic-1")
    await a.start()
    await a.assign([0, 1])
    await a.export(pushes(0, range(95, 100)))
    await a.flush()
    await a.export(pushes(1, range(5)))
    await a.flush()
    await a.close()
    assert sorted(landed(tmp_path)) == [(0, o) for o in range(95, 100)] + [(1, o) for o in range(5)]
