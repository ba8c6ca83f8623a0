"""The Spark landing schema and the Parquet writer's pyarrow schema agree field by field."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    TimestampType,
)

from spark_jobs.schema import LANDING_SCHEMA, PARTITION_COLUMNS, landing_schema
from tests.spark_jobs.support import writer_schema


def spark_type_for(arrow: pa.DataType) -> DataType:
    """The type Spark's Parquet reader gives a column the writer stores as ``arrow``."""
    if pa.types.is_timestamp(arrow):
        assert arrow.unit in ("us", "ms"), f"Spark cannot read timestamp[{arrow.unit}]"
        assert arrow.tz == "UTC", "landing times are UTC instants"
        return TimestampType()
    simple: dict[pa.DataType, DataType] = {
        pa.string(): StringType(),
        pa.large_string(): StringType(),
        pa.bool_(): BooleanType(),
        pa.float64(): DoubleType(),
        pa.int32(): IntegerType(),
        pa.int64(): LongType(),
        pa.uint32(): LongType(),
        pa.uint64(): DecimalType(20, 0),
    }
    if arrow in simple:
        return simple[arrow]
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return ArrayType(spark_type_for(arrow.value_type))
    if pa.types.is_map(arrow):
        return MapType(spark_type_for(arrow.key_type), spark_type_for(arrow.item_type))
    raise AssertionError(f"no Spark mapping for {arrow}")


def test_fields_agree_one_by_one() -> None:
    arrow = writer_schema()
    assert [f.name for f in LANDING_SCHEMA.fields] == arrow.names
    for spark_field, arrow_field in zip(LANDING_SCHEMA.fields, arrow, strict=True):
        expected = spark_type_for(arrow_field.type)
        actual = spark_field.dataType
        if isinstance(actual, ArrayType | MapType):
            # Spark marks list elements and map values nullable; compare the shapes.
            assert actual.simpleString() == expected.simpleString(), spark_field.name
        else:
            assert actual == expected, spark_field.name
    assert [f.name for f in landing_schema().fields][-2:] == list(PARTITION_COLUMNS)


def test_spark_reads_a_writer_file_with_the_explicit_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Includes the corners: unsigned counts at 2**63 and maps, read as typed.
    rows: dict[str, list[object]] = {name: [None] for name in writer_schema().names}
    rows.update(
        time=[1_763_700_000_000_000],
        count=[2**63 + 1],
        bucket_counts=[[1, 2**63]],
        attributes=[[("node.id", "1")]],
        metric_name=["m"],
    )
    table = pa.table(rows, schema=writer_schema())
    pq.write_table(table, tmp_path / "x.parquet")
    read = spark.read.schema(LANDING_SCHEMA).parquet(str(tmp_path / "x.parquet")).collect()
    assert read[0]["count"] == 2**63 + 1
    assert read[0]["bucket_counts"] == [1, 2**63]
    assert read[0]["attributes"] == {"node.id": "1"}
