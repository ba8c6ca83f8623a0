"""The Iceberg landing in-process: schema, counts, resume, conflicts, the switch from Parquet."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_CUMULATIVE, Metric

from exporters import registry
from exporters.api import TransientExportError
from exporters.iceberg import IcebergExporter, commits
from exporters.iceberg.lake import METRICS_PROPERTIES, open_catalog, open_table
from exporters.iceberg.lanes import ProcessLane
from exporters.iceberg.rows import ABSENT_BY_KIND, NEVER_NULL, file_layout, write_data_file
from exporters.iceberg.schema import (
    INT64_MAX,
    METRICS_STATISTICS,
    lake_metrics_schema,
    to_lake_rows,
)
from exporters.iceberg.settings import LakeLocation, lake_location
from exporters.landing.flatten import reference_table
from exporters.otlp_rows import COLUMNS
from report.lake import table_view
from tests.exporters.old_parquet import publish_old
from tests.exporters.support import PRODUCER_PUSH, T0, T1, kv, payload, push, run_exporter

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from exporters.api import LoggedPush


def run(path: Path, batches: Sequence[Sequence[LoggedPush]], **options: Any) -> IcebergExporter:
    log_id = options.pop("log_id", "log-1")
    return asyncio.run(
        run_exporter(IcebergExporter({"path": str(path), **options}), batches, log_id)
    )


def scan(exporter: IcebergExporter, name: str = "metrics") -> pa.Table:
    table = open_catalog(exporter.location).load_table(("kip714", name))
    return table.scan().to_arrow()


def _histogram(count: int, buckets: list[int]) -> bytes:
    metric = Metric(name="org.apache.kafka.client.latency")
    point = metric.histogram.data_points.add()
    point.time_unix_nano, point.start_time_unix_nano = T1, T0
    point.count, point.sum = count, 1.0
    point.bucket_counts.extend(buckets)
    point.explicit_bounds.extend([1.0] * (len(buckets) - 1))
    point.attributes.append(kv("node.id", string_value="3"))
    metric.histogram.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
    return payload(metric)


def test_the_schema_contract_columns_types_partitioning_and_sort(tmp_path: Path) -> None:
    # workers = 0: flattened in a thread of this process instead of a worker process.
    exporter = run(tmp_path, [[push(PRODUCER_PUSH.read_bytes(), offset=0)]], workers=0)
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    schema = table.schema()
    assert [f.name for f in schema.fields] == [
        *COLUMNS,
        *("node_id", "ingest_node", "log_partition", "push_bytes", "push_decoded_bytes"),
    ]
    types = {f.name: str(f.field_type) for f in schema.fields}
    assert types["log_partition"] == "int"
    assert table.properties["commit.retry.num-retries"] == "0"  # the landing retries itself
    assert types["time"] == types["start_time"] == types["received_time"] == "timestamptz"
    assert types["count"] == types["exp_zero_count"] == "long"
    assert types["bucket_counts"] == "list<long>"
    assert (
        types["exp_positive_bucket_counts"] == types["exp_negative_bucket_counts"] == "list<long>"
    )
    hour, kind = table.spec().fields
    assert str(hour.transform) == "hour"
    assert schema.find_field(hour.source_id).name == "received_time"
    assert str(kind.transform) == "identity"
    assert schema.find_field(kind.source_id).name == "metric_type"
    (order,) = table.sort_order().fields
    assert schema.find_field(order.source_id).name == "time"
    rows = scan(exporter)
    assert rows.num_rows == exporter.stats.rows_landed > 0
    assert set(rows.column("ingest_node").to_pylist()) == {exporter.node_id}
    assert (tmp_path / "node_id").read_text().strip() == exporter.node_id
    # A scan of one kind plans only that kind's files: the other kinds are never opened.
    sums = list(table.scan(row_filter="metric_type = 'sum'").plan_files())
    assert [t.file.partition[1] for t in sums] == ["sum"]
    assert len(list(table.scan().plan_files())) == len(set(rows.column("metric_type").to_pylist()))


def test_a_kinds_data_files_lack_the_columns_it_never_fills_and_read_them_as_null(
    tmp_path: Path,
) -> None:
    # Gauges and sums (librdkafka) and a histogram, each kind in its own file.
    pushes = [push(PRODUCER_PUSH.read_bytes(), offset=0), push(_histogram(5, [2, 3]), offset=1)]
    exporter = run(tmp_path, [pushes])
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    tasks = list(table.scan().plan_files())
    kinds = {t.file.partition[1] for t in tasks}
    assert kinds == {"gauge", "sum", "histogram"}
    for task in tasks:
        file_schema = pq.read_schema(task.file.file_path.removeprefix("file://"))
        names = set(file_schema.names)
        kind = task.file.partition[1]
        assert not names & set(ABSENT_BY_KIND[kind]), kind
        # Columns no row leaves null are required in the file: no definition levels.
        assert {f.name for f in file_schema if not f.nullable} == set(NEVER_NULL), kind
        assert names >= {"time", "metric_name", "attributes", "node_id"}
        assert ("value" in names) == (kind != "histogram")
        assert ("bucket_counts" in names) == (kind == "histogram")
    # Read through the table, the rows are the reference flattener's, every column.
    flat, _, _ = reference_table(pushes)
    expected, _ = to_lake_rows(flat, exporter.node_id, pushes=pushes)
    landed = scan(exporter)
    assert landed.schema.names == expected.schema.names
    order = [("push_offset", "ascending"), ("metric_name", "ascending"), ("time", "ascending")]
    assert landed.sort_by(order).to_pylist() == expected.sort_by(order).to_pylist()
    # And through the report's dataset view (pyarrow reading the files themselves).
    view = table_view(table).to_table()
    assert view.sort_by(order).to_pylist() == expected.sort_by(order).to_pylist()


def test_a_column_its_kind_never_fills_is_kept_when_it_holds_a_value() -> None:
    gauges = pa.table(
        {
            "time": pa.array([1, None], pa.int64()),
            "value": [1.0, 2.0],
            "count": pa.array([None, 3], pa.int64()),
        }
    )
    assert file_layout("gauge", gauges) == ((), ())  # a count kept, a null time optional
    assert file_layout("gauge", gauges.slice(0, 1)) == (("count",), ("time",))
    assert file_layout("exponential", gauges.slice(0, 1)) == ((), ("time",))  # no such kind


def test_node_id_is_decoded_from_the_attributes_once(tmp_path: Path) -> None:
    exporter = run(tmp_path, [[push(_histogram(5, [2, 3]), offset=0)]])
    (row,) = scan(exporter).to_pylist()
    assert row["node_id"] == "3"
    assert row["count"] == 5
    assert row["bucket_counts"] == [2, 3]


def test_a_count_beyond_a_long_is_refused_and_counted_never_wrapped(tmp_path: Path) -> None:
    batch = [
        push(_histogram(INT64_MAX + 1, [1, 2]), offset=0),
        push(_histogram(7, [INT64_MAX + 5, 1]), offset=1),
        push(_histogram(INT64_MAX, [INT64_MAX, 0]), offset=2),
    ]
    exporter = run(tmp_path, [batch])
    rows = scan(exporter).to_pylist()
    assert [r["push_offset"] for r in rows] == [2]
    assert rows[0]["count"] == INT64_MAX
    assert exporter.stats.refused_counts == 2


def test_restart_resumes_after_the_newest_snapshot_of_this_node(tmp_path: Path) -> None:
    data = PRODUCER_PUSH.read_bytes()
    first = run(tmp_path, [[push(data, offset=i) for i in range(10)]])
    again = run(tmp_path, [[push(data, offset=i) for i in range(5, 15)]])
    assert again.stats.replayed_pushes_skipped == 5
    offsets = scan(again).column("push_offset").to_pylist()
    assert sorted(set(offsets)) == list(range(15))
    assert len(offsets) == 15 * first.stats.rows_landed // 10
    # Another node sharing the table has its own position.
    other = run(tmp_path, [[push(data, offset=i) for i in range(3)]], node_id="other")
    assert other.stats.replayed_pushes_skipped == 0
    table = open_catalog(other.location).load_table(("kip714", "metrics"))
    mine = commits.committed_position(table, again.node_id)
    assert mine is not None
    assert (mine.log_id, mine.offset_end) == ("log-1", 14)
    # A new ingest log (its directory was replaced) starts from its own offset 0.
    fresh = run(tmp_path, [[push(data, offset=0)]], log_id="log-2")
    assert fresh.stats.replayed_pushes_skipped == 0
    assert fresh.stats.rows_landed == first.stats.rows_landed // 10


def test_a_commit_from_a_stale_table_lands_once_beside_the_winner(tmp_path: Path) -> None:
    exporter = run(tmp_path, [[push(PRODUCER_PUSH.read_bytes(), offset=0)]])
    catalog = open_catalog(exporter.location)
    stale = catalog.load_table(("kip714", "metrics"))
    winner = catalog.load_table(("kip714", "metrics"))
    rows = scan(exporter).slice(0, 1)
    hour = rows.column("received_time").cast(pa.int64())[0].as_py() // 3_600_000_000
    path = write_data_file(
        winner.io, winner.location(), rows.cast(lake_metrics_schema()), hour, "winner"
    )
    winner.add_files([path], check_duplicate_files=False)
    mine = write_data_file(
        stale.io, stale.location(), rows.cast(lake_metrics_schema()), hour, "mine"
    )
    conflicts: list[int] = []
    properties = {commits.NODE_ID: "n", commits.LOG_ID: "l", commits.OFFSET_START: "0"}
    committed = commits.commit_files(
        stale, [mine], {**properties, commits.OFFSET_END: "0"}, conflicts
    )
    # pyiceberg retries a lost fast append itself first; either way it lands once.
    assert len(conflicts) <= 1
    assert committed.scan().to_arrow().num_rows == exporter.stats.rows_landed + 2
    position = commits.committed_position(committed.refresh(), "n")
    assert position is not None
    assert position.offset_end == 0


def test_switching_from_a_parquet_landing_starts_after_its_last_publication(
    tmp_path: Path,
) -> None:
    data = PRODUCER_PUSH.read_bytes()

    # A data directory the retired Parquet landing published offsets 0..7 of log-1 into.
    publish_old(tmp_path, [push(data, offset=i) for i in range(8)], log_id="log-1")
    # The host replays from its own committed position, which may lag the landing.
    lake = run(tmp_path, [[push(data, offset=i) for i in range(12)]])
    assert lake.stats.replayed_pushes_skipped == 8
    assert sorted(set(scan(lake).column("push_offset").to_pylist())) == list(range(8, 12))
    # Another log's Parquet landing says nothing about this log.
    other = run(tmp_path / "x", [[push(data, offset=i) for i in range(2)]], log_id="log-9")
    assert other.stats.replayed_pushes_skipped == 0


def test_schema_evolution_adds_missing_columns_by_name(tmp_path: Path) -> None:
    exporter = IcebergExporter({"path": str(tmp_path)})
    catalog = open_catalog(exporter.location)
    # A table an earlier version created: without ``ingest_node`` and ``log_partition``.
    added = {"ingest_node", "log_partition"}
    old = pa.schema([f for f in lake_metrics_schema() if f.name not in added])
    catalog.create_table(("kip714", "metrics"), schema=old)
    table = open_table(catalog, "kip714", "metrics")
    names = [f.name for f in table.schema().fields]
    assert names[:-2] == old.names
    assert set(names[-2:]) == added


def test_data_files_carry_statistics_only_for_the_columns_the_table_keeps_metrics_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Statistics of columns nobody prunes on were a quarter of the Parquet encoding.
    exporter = run(tmp_path, [[push(PRODUCER_PUSH.read_bytes(), offset=0)]], workers=0)
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    assert table.properties["write.metadata.metrics.default"] == "none"
    for name in METRICS_STATISTICS:
        assert table.properties[f"write.metadata.metrics.column.{name}"] == "truncate(16)"
    kept = {table.schema().find_field(name).field_id for name in METRICS_STATISTICS}
    tasks = list(table.scan().plan_files())
    assert tasks
    for task in tasks:
        assert set(task.file.lower_bounds) == set(task.file.upper_bounds) == kept
        metadata = pq.ParquetFile(task.file.file_path.removeprefix("file://")).metadata
        columns = [metadata.row_group(0).column(i) for i in range(metadata.num_columns)]
        with_statistics = {c.path_in_schema for c in columns if c.is_stats_set}
        assert with_statistics == set(METRICS_STATISTICS)
    # The commit found each file's partition, and a filter on time still prunes.
    rows = scan(exporter)
    assert {t.file.partition[1] for t in tasks} == set(rows["metric_type"].to_pylist())
    first = min(rows["time"].to_pylist()).isoformat()
    assert not list(table.scan(row_filter=f"time < '{first}'").plan_files())
    assert len(list(table.scan(row_filter=f"time >= '{first}'").plan_files())) == len(tasks)
    assert not [r for r in caplog.records if "statistics missing" in r.getMessage()]


def test_a_table_an_earlier_version_created_gets_the_metrics_properties(tmp_path: Path) -> None:
    exporter = IcebergExporter({"path": str(tmp_path)})
    catalog = open_catalog(exporter.location)
    catalog.create_table(("kip714", "metrics"), schema=lake_metrics_schema())
    table = open_table(catalog, "kip714", "metrics")
    assert {k: table.properties.get(k) for k in METRICS_PROPERTIES} == METRICS_PROPERTIES
    assert open_table(catalog, "kip714", "metrics").metadata_location == table.metadata_location


def test_the_entry_point_and_option_errors(tmp_path: Path) -> None:
    assert registry.load("iceberg") is IcebergExporter
    with pytest.raises(TypeError, match="colour"):
        IcebergExporter({"path": str(tmp_path), "colour": 1})
    with pytest.raises(ValueError, match="catalog"):
        IcebergExporter({"path": str(tmp_path), "catalog": {"type": "hive", "uri": "x"}})
    with pytest.raises(ValueError, match="node_id"):
        IcebergExporter({"catalog": {"type": "sql", "uri": "sqlite:///x"}, "warehouse": "/w"})


def failing(exporter: IcebergExporter) -> str | None:
    return exporter.failing


def test_a_dead_worker_costs_its_generation_and_the_replay_lands_everything_once(
    tmp_path: Path,
) -> None:
    data = PRODUCER_PUSH.read_bytes()

    async def crash() -> IcebergExporter:
        exporter = IcebergExporter({"path": str(tmp_path), "max_file_age_s": 60})
        exporter.bind_log("log-1")
        await exporter.start()
        try:
            await exporter.export([push(data, offset=i) for i in range(5)])
            await exporter.flush()
            await exporter.export([push(data, offset=i) for i in range(5, 10)])
            lane = exporter._lanes[0]
            assert isinstance(lane, ProcessLane)
            lane._handle.process.kill()  # the OOM killer, say
            await asyncio.to_thread(lane._handle.process.join, 10)
            with pytest.raises(TransientExportError):
                await exporter.flush()
            assert exporter.failure is None  # not stopped: it retries by itself
            assert exporter.failing is not None
            assert exporter.durable_offset() == 5  # the host commits nothing past it
            assert exporter.take_replay() == 5  # and feeds again from there, once
            assert exporter.take_replay() is None
            # As the host does: the same pushes again, retried until the backoff has passed.
            for _ in range(200):
                try:
                    await exporter.export([push(data, offset=i) for i in range(5, 12)])
                    break
                except TransientExportError:
                    await asyncio.sleep(0.05)
            await exporter.flush()
            assert failing(exporter) is None
            assert exporter.durable_offset() == 12
        finally:
            await exporter.close()
        return exporter

    crashed = asyncio.run(crash())
    assert crashed.stats.failure_streaks == 1
    assert crashed.stats.failures >= 1
    offsets = scan(crashed).column("push_offset").to_pylist()
    per_push = crashed.stats.rows_landed // 12
    assert sorted(set(offsets)) == list(range(12))
    assert len(offsets) == 12 * per_push


def test_a_worker_killed_during_its_commit_is_resolved_by_the_table(tmp_path: Path) -> None:
    """The commit runs in the first lane: its death leaves the outcome unknown, the table decides.

    The catalog is held locked (another SQLite connection), so the lane's
    commit waits inside the catalog when the lane is killed.
    """
    data = PRODUCER_PUSH.read_bytes()

    async def crash() -> IcebergExporter:
        exporter = IcebergExporter({"path": str(tmp_path), "max_file_age_s": 60, "workers": 1})
        exporter.bind_log("log-1")
        await exporter.start()
        try:
            await exporter.export([push(data, offset=i) for i in range(5)])
            await exporter.flush()
            await exporter.export([push(data, offset=i) for i in range(5, 10)])
            lane = exporter._lanes[0]
            assert isinstance(lane, ProcessLane)
            lock = sqlite3.connect(tmp_path / "lake" / "catalog.db", isolation_level=None)
            try:
                lock.execute("BEGIN EXCLUSIVE")
                written = exporter.stats.files_written
                flush = asyncio.ensure_future(exporter.flush())
                for _ in range(600):  # the files are written: the commit request is next
                    if exporter.stats.files_written > written or flush.done():
                        break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)
                lane._handle.process.kill()
                with pytest.raises(TransientExportError):
                    await flush
            finally:
                lock.execute("ROLLBACK")
                lock.close()
            assert exporter.stats.commits == 1  # only the first generation is known committed
            assert exporter.durable_offset() == 5
            assert exporter.take_replay() == 5
            for _ in range(200):  # the host's replay, refused until the backoff has passed
                try:
                    await exporter.export([push(data, offset=i) for i in range(5, 12)])
                    break
                except TransientExportError:
                    await asyncio.sleep(0.05)
            await exporter.flush()
            assert exporter.failing is None
            assert exporter.durable_offset() == 12
        finally:
            await exporter.close()
        return exporter

    crashed = asyncio.run(crash())
    assert crashed.stats.failure_streaks == 1
    offsets = scan(crashed).column("push_offset").to_pylist()
    per_push = crashed.stats.rows_landed // 12
    assert sorted(set(offsets)) == list(range(12))
    assert len(offsets) == 12 * per_push  # each push once


def test_the_server_runs_maintenance_on_its_schedule(tmp_path: Path) -> None:
    data = PRODUCER_PUSH.read_bytes()
    hour_ms = 3_600_000
    old = (int(time.time() * 1000) // hour_ms - 3) * hour_ms  # a closed hour

    async def serve() -> IcebergExporter:
        exporter = IcebergExporter(
            {
                "path": str(tmp_path),
                "workers": 0,
                "compact_after_hours": 0,
                "maintenance_interval_s": 0.2,
            }
        )
        exporter.bind_log("log-1")
        await exporter.start()
        try:
            for offset in range(3):  # three commits, three files in one old hour
                await exporter.export([push(data, offset=offset, received_time_ms=old)])
                await exporter.flush()
            stats = exporter.maintenance_stats
            assert stats is not None
            for _ in range(200):
                if stats.hours_compacted:
                    break
                await asyncio.sleep(0.05)
            assert stats.hours_compacted == 1
            assert stats.failures == 0
        finally:
            await exporter.close()
        return exporter

    exporter = asyncio.run(serve())
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    rows = scan(exporter)
    # Compacted: one file per kind (its partition) in the hour.
    assert len(list(table.scan().plan_files())) == len(set(rows.column("metric_type").to_pylist()))
    assert sorted(set(rows.column("push_offset").to_pylist())) == [0, 1, 2]
    assert IcebergExporter({"path": str(tmp_path)}).maintenance_stats is None  # none configured


def test_nodes_opening_a_fresh_catalog_at_once_all_get_the_table(tmp_path: Path) -> None:
    # Six nodes starting together on a fresh catalog: the ones that lose the race to create
    # the table load it (pyiceberg's SQL catalog says "already exists" in two ways).
    failures: list[str] = []
    for round_ in range(3):
        location = lake_location({}, tmp_path / f"round-{round_}")
        open_catalog(location)
        together = threading.Barrier(6)

        def start_node(
            where: LakeLocation = location, barrier: threading.Barrier = together
        ) -> None:
            catalog = open_catalog(where)
            barrier.wait(30)
            try:
                open_table(catalog, where.namespace, "metrics")
            except Exception as error:
                failures.append(repr(error))

        nodes = [threading.Thread(target=start_node) for _ in range(6)]
        for thread in nodes:
            thread.start()
        for thread in nodes:
            thread.join(60)
        assert not any(thread.is_alive() for thread in nodes)
    assert failures == []
