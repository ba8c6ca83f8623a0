"""``read_rollup``: Iceberg tables first, the Parquet rollups of older data directories else."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from report.lake import read_rollup
from tests.report.lake_tables import HEALTH_SCHEMA, T0, write_tables

if TYPE_CHECKING:
    from pathlib import Path


def _health(client_id: str, start: dt.datetime) -> dict[str, object]:
    return {
        "window_start": start,
        "window_end": start + dt.timedelta(hours=1),
        "client_id": client_id,
        "client_instance_id": "AAAAAAAAAAAAAAAAAAAAAQ",
    }


def test_parquet_rollups_are_read_when_there_is_no_lake(tmp_path: Path) -> None:
    # As Spark wrote them before the lake: hive partitions, zone-less timestamps in UTC.
    schema = HEALTH_SCHEMA.set(0, pa.field("window_start", pa.timestamp("us")))
    for hour in (10, 11):
        start = T0.replace(hour=hour)
        part = tmp_path / "rollups" / "client_health_1h" / "date=2026-11-25" / f"hour={hour}"
        part.mkdir(parents=True)
        row = {**_health(f"c{hour}", start), "window_start": start.replace(tzinfo=None)}
        pq.write_table(pa.Table.from_pylist([row], schema=schema), part / "part-0.parquet")
    table = read_rollup(tmp_path, "client_health_1h", T0.replace(hour=11))
    assert table is not None
    assert table["client_id"].to_pylist() == ["c11"]
    assert table["window_start"].to_pylist() == [T0.replace(hour=11)]
    assert read_rollup(tmp_path, "gauges_1m") is None


def test_iceberg_tables_win_and_the_range_is_half_open(tmp_path: Path) -> None:
    write_tables(tmp_path, [_health("a", T0), _health("b", T0 + dt.timedelta(hours=1))], [])
    table = read_rollup(tmp_path, "client_health_1h", T0, T0 + dt.timedelta(hours=1))
    assert table is not None
    assert table["client_id"].to_pylist() == ["a"]
    gauges = read_rollup(tmp_path, "gauges_1m", metric_names=["x"])
    assert gauges is not None and gauges.num_rows == 0
    assert read_rollup(tmp_path, "no_such_table") is None
