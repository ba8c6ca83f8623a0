"""Hand-made landing rows for the Spark tests, as the landing table holds them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from exporters.otlp_rows import COLUMNS
from spark_jobs.schema import LANDING_SCHEMA
from tests.spark_jobs.lake_writer import decoded_node_id


def at(minute: int, second: int = 0, hour: int = 4) -> datetime:
    return datetime(2026, 11, 21, hour, minute, second, tzinfo=UTC)


def point(**fields: Any) -> dict[str, Any]:
    """A landing row: a gauge of client ``c1`` unless ``fields`` say otherwise.

    ``node_id`` is decoded from the attributes as the landing does, unless given.
    """
    row: dict[str, Any] = dict.fromkeys((*COLUMNS, "node_id", "ingest_node"))
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
    if "node_id" not in fields:
        row["node_id"] = decoded_node_id(row["attributes"])
    return row


def frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """Rows as Spark reads them from the landing table."""
    return spark.createDataFrame(rows, LANDING_SCHEMA)


def assert_rows(spark: SparkSession, actual: DataFrame, expected: list[tuple[Any, ...]]) -> None:
    """Exact comparison (floats to 1e-9 relative) against rows in ``actual``'s column order."""
    expected_frame = spark.createDataFrame(expected, actual.schema)
    assertDataFrameEqual(actual, expected_frame, rtol=1e-9, atol=1e-12)
