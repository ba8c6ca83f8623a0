"""Lake rows built by counting instead of sorting give what a per-row lookup gives."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from exporters.iceberg.rows import LakeRows, LaneConfig
from exporters.iceberg.schema import (
    METRICS_TABLE,
    NODE_ID_ATTRIBUTES,
    _node_ids,
    lake_metrics_schema,
    to_lake_rows,
)
from exporters.landing.flatten import reference_table
from tests.exporters.support import PRODUCER_PUSH, push

if TYPE_CHECKING:
    from pathlib import Path

MAPS = pa.map_(pa.string(), pa.string())


def expected(rows: list[list[tuple[str, str]] | None]) -> list[str | None]:
    """The first ``NODE_ID_ATTRIBUTES`` key (in key order) each row holds, by a plain loop."""
    out: list[str | None] = []
    for entries in rows:
        found = None
        for key in NODE_ID_ATTRIBUTES:
            values = [v for k, v in entries or [] if k == key]
            if values:
                found = values[0]
                break
        out.append(found)
    return out


def random_rows(
    rng: random.Random, count: int, crowded: bool
) -> list[list[tuple[str, str]] | None]:
    keys = [*NODE_ID_ATTRIBUTES, "host", "topic"]
    rows: list[list[tuple[str, str]] | None] = []
    for _ in range(count):
        if rng.random() < 0.1:
            rows.append(None if rng.random() < 0.5 else [])
            continue
        entries = [(rng.choice(keys[3:]), str(rng.randrange(9))) for _ in range(rng.randrange(3))]
        hits = rng.randrange(3 if crowded else 2)
        for key in rng.sample(NODE_ID_ATTRIBUTES, hits):
            entries.insert(rng.randrange(len(entries) + 1), (key, str(rng.randrange(99))))
        rows.append(entries)
    return rows


def test_node_ids_match_a_lookup_per_row_sliced_chunked_and_crowded() -> None:
    rng = random.Random(714)
    for crowded in (False, True):
        for _ in range(20):
            rows = random_rows(rng, 40, crowded)
            column = pa.array(rows, MAPS)
            assert _node_ids(pa.chunked_array([column])).to_pylist() == expected(rows)
            # A slice's children are the whole array's: only the slice's entries count.
            start, stop = sorted(rng.sample(range(41), 2))
            part = pa.chunked_array([column.slice(start, stop - start)])
            assert _node_ids(part).to_pylist() == expected(rows[start:stop])
            halves = pa.chunked_array([column.slice(0, 20), column.slice(20)])
            assert _node_ids(halves).to_pylist() == expected(rows)


def test_a_lanes_data_file_reads_as_plain_lake_rows(tmp_path: Path) -> None:
    # The lane hands Parquet dictionaries for its repeating strings; the file
    # holds no Arrow schema, so every reader sees the lake's plain types.
    pushes = [push(PRODUCER_PUSH.read_bytes(), offset=i) for i in range(3)]
    lane = LakeRows(LaneConfig(0, "n", {METRICS_TABLE: f"file://{tmp_path}"}, {}, "t"))
    lane.batch(pushes[:2], 0, None)
    lane.batch(pushes[2:], 0, None)
    files, _ = lane.write(0, 2)
    read = pa.concat_tables([pq.read_table(f.location.removeprefix("file://")) for f in files])
    assert read.schema == lake_metrics_schema()
    flat, _, _ = reference_table(pushes)
    rows, _ = to_lake_rows(flat, "n", pushes=pushes)
    order = [("push_offset", "ascending"), ("metric_name", "ascending"), ("time", "ascending")]
    assert read.sort_by(order).to_pylist() == rows.sort_by(order).to_pylist()


def test_each_row_gets_its_pushs_sizes_whether_the_offsets_run_on_or_skip() -> None:
    # Consecutive offsets (a local log's batch) are subtracted, others looked up.
    data = PRODUCER_PUSH.read_bytes()
    for offsets in ([4, 5, 6], [4, 9, 30], [6, 5, 4]):
        pushes = [
            push(data, offset=o, received_bytes=100 + i, decoded_bytes=1000 + i)
            for i, o in enumerate(offsets)
        ]
        flat, _, _ = reference_table(pushes)
        rows, _ = to_lake_rows(flat, "n", pushes=pushes)
        sizes = {o: (100 + i, 1000 + i) for i, o in enumerate(offsets)}
        got = zip(
            rows["push_offset"].to_pylist(),
            rows["push_bytes"].to_pylist(),
            rows["push_decoded_bytes"].to_pylist(),
            strict=True,
        )
        assert {(o, b, d) for o, b, d in got} == {(o, *sizes[o]) for o in offsets}
        assert rows["log_partition"].null_count == rows.num_rows
