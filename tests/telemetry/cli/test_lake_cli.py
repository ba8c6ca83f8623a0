"""``kip714 lake``: tables, snapshots, query, compact, expire and import-parquet on a real lake."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from exporters.iceberg import IcebergExporter
from exporters.iceberg.lake import open_catalog
from telemetry.cli.lake import main
from tests.exporters.old_parquet import publish_old
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, push, run_exporter

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from exporters.api import LoggedPush


def _batches(first: int, count: int) -> list[list[LoggedPush]]:
    payloads = (PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes())
    return [[push(payloads[i % 2], offset=first + i)] for i in range(count)]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_tables_snapshots_query_compact_expire(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exporter = IcebergExporter({"path": str(tmp_path), "node_id": "n1"})
    exporter.bind_log("log-1")
    asyncio.run(run_exporter(exporter, _batches(0, 4), flush_each=True))
    rows = exporter.stats.rows_landed
    data = ("--data-dir", str(tmp_path))
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    kinds = len(set(table.scan(selected_fields=("metric_type",)).to_arrow()[0].to_pylist()))
    assert kinds == 2  # gauges and sums: a file of each per push (the table is partitioned by kind)

    code, out, _ = run(capsys, *data, "tables")
    assert code == 0
    assert f"kip714.metrics: {rows} rows, {4 * kinds} files, 4 snapshots" in out

    code, out, _ = run(capsys, *data, "snapshots", "--limit", "2")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2
    assert "node n1 offsets 3..3" in lines[0]

    code, out, _ = run(
        capsys, *data, "query", "select count(*) as n, count(distinct push_offset) from metrics"
    )
    assert code == 0
    assert out.splitlines()[1] == f"{rows}\t4"

    code, out, _ = run(capsys, *data, "compact", "--after-hours", "0")
    assert code == 0
    assert f"compacted 1 hour(s), {4 * kinds} file(s) rewritten" in out
    code, out, _ = run(capsys, *data, "tables")
    assert f"kip714.metrics: {rows} rows, {kinds} files" in out

    code, out, _ = run(capsys, *data, "expire", "--older-than-hours", "1")
    assert code == 0
    assert out.startswith("expired 0 snapshot(s)")  # all younger than an hour

    code, _, err = run(capsys, *data, "query", "select * from nowhere")
    assert code == 2
    assert "nowhere" in err


def test_import_parquet_lands_each_file_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = sum(publish_old(tmp_path, batch) for batch in _batches(0, 3))
    data = ("--data-dir", str(tmp_path))

    code, out, err = run(capsys, *data, "import-parquet")
    assert code == 2  # no lake there yet: made only when asked
    assert "--create" in err
    code, out, _ = run(capsys, *data, "import-parquet", "--create")
    assert code == 0, out
    assert f"imported 3 file(s) ({rows} rows, 1 commit(s)); 0 already imported" in out
    code, out, _ = run(capsys, *data, "import-parquet")
    assert "imported 0 file(s) (0 rows, 0 commit(s)); 3 already imported" in out

    later = sum(publish_old(tmp_path, batch) for batch in _batches(3, 1))
    code, out, _ = run(capsys, *data, "import-parquet")
    assert "imported 1 file(s)" in out
    assert "3 already imported" in out

    exporter = IcebergExporter({"path": str(tmp_path)})
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    offsets = table.scan(selected_fields=("push_offset",)).to_arrow().column(0).to_pylist()
    assert sorted(set(offsets)) == [0, 1, 2, 3]
    assert len(offsets) == rows + later
    node = (tmp_path / "node_id").read_text().strip()
    nodes = table.scan(selected_fields=("ingest_node",)).to_arrow().column(0).unique()
    assert nodes.to_pylist() == [node]


def test_a_bad_config_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "kip714.toml"
    config.write_text('[lake]\ncatalog = { type = "hive", uri = "x" }\n')
    code, _, err = run(capsys, "--config", str(config), "tables")
    assert code == 2
    assert err.startswith("kip714 lake tables: ")
    assert "lake.catalog" in err
