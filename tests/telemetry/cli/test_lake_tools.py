"""``kip714 lake``: never makes a lake unasked, sees every table, reads lazily (issue 36)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import TYPE_CHECKING

from exporters.iceberg import IcebergExporter
from exporters.iceberg.lake import open_catalog
from telemetry.cli.lake import main
from tests.exporters.support import run_exporter
from tests.report.lake_tables import T0, write_tables
from tests.telemetry.cli.test_lake_cli import _batches

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


MAX_VALUE = "select max(value) from metrics"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _landed(tmp_path: Path, pushes: int = 4) -> int:
    exporter = IcebergExporter({"path": str(tmp_path), "node_id": "n1"})
    exporter.bind_log("log-1")
    asyncio.run(run_exporter(exporter, _batches(0, pushes), flush_each=True))
    return exporter.stats.rows_landed


def test_a_path_with_no_lake_is_refused_and_left_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "kip714-dta"
    for argv in (
        ("--data-dir", str(typo), "tables"),
        ("tables", "--data-dir", str(typo)),
        ("--data-dir", str(typo), "query", "select 1"),
        ("snapshots", "--data-dir", str(typo)),
    ):
        code, out, err = run(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert len(err.strip().splitlines()) == 1, err
        assert "no lake at" in err
        assert "--create" in err
        assert not typo.exists(), argv
    # An existing directory without a lake: still nothing created in it.
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, _ = run(capsys, "tables", "--data-dir", str(empty))
    assert code == 2
    assert list(empty.iterdir()) == []
    # --create makes the empty lake, before or after the verb.
    code, out, _ = run(capsys, "tables", "--data-dir", str(typo), "--create")
    assert code == 0
    assert "no tables in namespace kip714" in out
    assert (typo / "lake" / "catalog.db").is_file()
    code, _, _ = run(capsys, "--data-dir", str(typo), "tables")
    assert code == 0  # now a lake: the namespace exists


def test_rollup_tables_are_listed_and_queryable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _landed(tmp_path)
    health = [
        {
            "window_start": T0,
            "window_end": T0 + dt.timedelta(hours=1),
            "client_id": "c",
            "client_instance_id": "AAAAAAAAAAAAAAAAAAAAAQ",
            "client_type": "producer",
            "request_latency_p99_ms": 12.5,
        }
    ]
    gauges = [
        {
            "window_start": T0 + dt.timedelta(minutes=m),
            "window_end": T0 + dt.timedelta(minutes=m + 1),
            "metric_name": "org.apache.kafka.producer.node.request.latency.avg",
            "client_instance_id": "AAAAAAAAAAAAAAAAAAAAAQ",
            "count": 1,
            "p99": float(m),
        }
        for m in range(3)
    ]
    write_tables(tmp_path, health, gauges, existing_lake=True)
    code, out, _ = run(capsys, "tables", "--data-dir", str(tmp_path))
    assert code == 0
    listed = [line.split(":")[0] for line in out.splitlines()]
    assert listed == ["kip714.client_health_1h", "kip714.gauges_1m", "kip714.metrics"]
    assert f"kip714.metrics: {rows} rows" in out
    code, out, err = run(
        capsys,
        "--data-dir",
        str(tmp_path),
        "query",
        "select h.request_latency_p99_ms, count(g.p99) from client_health_1h h "
        "join gauges_1m g using (client_instance_id) group by 1",
    )
    assert code == 0, err
    assert out.splitlines()[1] == "12.5\t3"
    # --where applies to rows, not only to the files it prunes.
    code, out, err = run(
        capsys,
        "query",
        "select count(*) from gauges_1m",
        "--where",
        f"window_start >= '{(T0 + dt.timedelta(minutes=1)).isoformat()}'",
        "--data-dir",
        str(tmp_path),
    )
    assert code == 0, err
    assert out.splitlines()[1] == "2"


def test_select_1_opens_no_data_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _landed(tmp_path)
    exporter = IcebergExporter({"path": str(tmp_path)})
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    files = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    assert files
    for path in files:  # every data file unreadable: only a query that opens one can fail
        with open(path, "wb") as file:
            file.write(b"not parquet")
    code, out, err = run(capsys, "--data-dir", str(tmp_path), "query", "select 1 as one")
    assert code == 0, err
    assert out.splitlines() == ["one", "1"]
    code, _, err = run(
        capsys, "--data-dir", str(tmp_path), "query", "select max(value) from metrics"
    )
    assert code == 2  # the files are read when the SQL needs them
    assert len(err.strip().splitlines()) == 1
