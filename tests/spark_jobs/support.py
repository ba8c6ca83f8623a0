"""Hand-made landing rows for the Spark tests, in the writer's types."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from exporters.otlp_rows import COLUMNS, arrow_schema
from spark_jobs.schema import landing_schema

_U64_COLUMNS = {
    "count",
    "exp_zero_count",
    "bucket_counts",
    "exp_positive_bucket_counts",
    "exp_negative_bucket_counts",
}


def writer_schema() -> pa.Schema:
    """The Parquet writer's schema when its module exists, else otlp_rows' with microsecond times.

    The writer (``exporters.parquet.schema``) is the one that decides what is
    stored; until it lands, otlp_rows' schema with the documented
    ``timestamp[us, UTC]`` storage unit stands in for it.
    """
    try:
        module = importlib.import_module("exporters.parquet.schema")
    except ImportError:
        module = None
    if module is not None:
        for name in ("metrics_schema", "landing_schema", "parquet_schema", "LANDING_SCHEMA"):
            found = getattr(module, name, None)
            if isinstance(found, pa.Schema):
                return found
            if callable(found):
                schema = found()
                if isinstance(schema, pa.Schema):
                    return schema
        raise AssertionError("exporters.parquet.schema exposes no pyarrow schema this test knows")
    us = pa.timestamp("us", tz="UTC")
    base: pa.Schema = arrow_schema()
    return pa.schema([pa.field(f.name, us) if pa.types.is_timestamp(f.type) else f for f in base])


def at(minute: int, second: int = 0, hour: int = 4) -> datetime:
    return datetime(2026, 11, 21, hour, minute, second, tzinfo=UTC)


def point(**fields: Any) -> dict[str, Any]:
    """A landing row: a gauge of client ``c1`` unless ``fields`` say otherwise."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        client_id="c1",
        client_instance_id="i1",
        client_software_name="librdkafka",
        client_software_version="2.16.0",
        metric_name="m",
        metric_type="gauge",
        temporality="none",
        attributes={},
        resource_attributes={},
        terminating=False,
        push_offset=1,
    )
    row.update(fields)
    return row


def frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """Rows as Spark reads them from the landing (unsigned counts as decimal(20,0))."""
    converted = []
    for row in rows:
        out = dict(row)
        for column in _U64_COLUMNS:
            value = out.get(column)
            if isinstance(value, list):
                out[column] = [None if v is None else Decimal(v) for v in value]
            elif value is not None:
                out[column] = Decimal(value)
        converted.append(out)
    return spark.createDataFrame(converted, landing_schema(with_partitions=False))


def write_landing(data_dir: Path, rows: list[dict[str, Any]], name: str) -> list[Path]:
    """Write rows as landing files, one per ``date/hour`` of their ``time``, like the writer."""
    by_hour: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        time: datetime = row["time"]
        by_hour.setdefault((f"{time:%Y-%m-%d}", f"{time:%H}"), []).append(row)
    paths = []
    for (date, hour), hour_rows in sorted(by_hour.items()):
        directory = data_dir / "metrics" / f"date={date}" / f"hour={hour}"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name}.parquet"
        temporary = directory / f".{name}.parquet.tmp"
        pq.write_table(pa.Table.from_pylist(hour_rows, schema=writer_schema()), temporary)
        temporary.rename(path)
        paths.append(path)
    return paths


def assert_rows(spark: SparkSession, actual: DataFrame, expected: list[tuple[Any, ...]]) -> None:
    """Exact comparison (floats to 1e-9 relative) against rows in ``actual``'s column order."""
    expected_frame = spark.createDataFrame(expected, actual.schema)
    assertDataFrameEqual(actual, expected_frame, rtol=1e-9, atol=1e-12)
