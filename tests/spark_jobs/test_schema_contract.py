"""The Spark landing schema, the landing table's and what Spark reads from it agree."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    TimestampType,
)

from exporters.otlp_rows import arrow_schema
from spark_jobs.lake import Lake
from spark_jobs.schema import LANDING_SCHEMA
from tests.spark_jobs.lake_writer import append_rows, landing_arrow_schema
from tests.spark_jobs.support import at, point


def spark_type_for(arrow: pa.DataType) -> DataType:
    """The type Spark reads for an Iceberg column the landing writes as ``arrow``."""
    if pa.types.is_timestamp(arrow):
        assert arrow.unit == "us", "Iceberg timestamps are microseconds"
        assert arrow.tz == "UTC", "landing times are UTC instants (timestamptz)"
        return TimestampType()
    simple: dict[pa.DataType, DataType] = {
        pa.string(): StringType(),
        pa.large_string(): StringType(),
        pa.bool_(): BooleanType(),
        pa.float64(): DoubleType(),
        pa.int32(): IntegerType(),
        pa.int64(): LongType(),
    }
    if arrow in simple:
        return simple[arrow]
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return ArrayType(spark_type_for(arrow.value_type))
    if pa.types.is_map(arrow):
        return MapType(spark_type_for(arrow.key_type), spark_type_for(arrow.item_type))
    raise AssertionError(f"no Spark mapping for {arrow}")


def test_fields_agree_one_by_one() -> None:
    arrow = landing_arrow_schema()
    assert arrow.names == [
        *arrow_schema().names,
        *("node_id", "ingest_node", "log_partition", "push_bytes", "push_decoded_bytes"),
    ]
    assert [f.name for f in LANDING_SCHEMA.fields] == arrow.names
    for spark_field, arrow_field in zip(LANDING_SCHEMA.fields, arrow, strict=True):
        expected = spark_type_for(arrow_field.type)
        assert spark_field.dataType.simpleString() == expected.simpleString(), spark_field.name


def test_spark_reads_the_landing_table_in_the_stated_schema(
    spark: SparkSession, lake: Lake
) -> None:
    append_rows(lake, [point(time=at(0), metric_type="histogram", count=2**63 - 1,
                             bucket_counts=[1, 2**62], attributes={"node.id": "7"})])  # fmt: skip
    table = spark.table(lake.landing)
    assert [(f.name, f.dataType.simpleString()) for f in table.schema.fields] == [
        (f.name, f.dataType.simpleString()) for f in LANDING_SCHEMA.fields
    ]
    row = table.collect()[0]
    assert (row["count"], row["bucket_counts"], row["node_id"]) == (2**63 - 1, [1, 2**62], "7")
    assert row["attributes"] == {"node.id": "7"}
