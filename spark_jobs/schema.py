"""The Parquet landing schema as Spark sees it.

``spark_jobs`` may not import ``exporters``, so the landing schema is stated a
second time here; ``tests/spark_jobs/test_schema_contract.py`` compares it
field by field with the writer's pyarrow schema, which is the only place the
two definitions meet.

Reading with an explicit schema (never inference) keeps every job and the
streaming source on the same types whatever files are present, and makes a
column the writer has not written yet read as null instead of failing.

Types follow Spark's Parquet reader, not pyarrow's names: an unsigned 64-bit
column (``count``, ``bucket_counts``, ...) can only be read as
``decimal(20,0)`` (reading it as ``bigint`` fails inside the dictionary
decoder), and ``timestamp[us, UTC]`` reads as ``TimestampType``. Rollups cast
the unsigned columns to ``bigint`` once, in ``rollups.points``.
"""

from __future__ import annotations

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
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["LANDING_SCHEMA", "PARTITION_COLUMNS", "landing_schema"]

_U64: DataType = DecimalType(20, 0)
_STRING_MAP: DataType = MapType(StringType(), StringType(), valueContainsNull=True)

_FIELDS: tuple[tuple[str, DataType], ...] = (
    ("time", TimestampType()),
    ("start_time", TimestampType()),
    ("received_time", TimestampType()),
    ("client_instance_id", StringType()),
    ("client_id", StringType()),
    ("client_software_name", StringType()),
    ("client_software_version", StringType()),
    ("client_source_address", StringType()),
    ("principal", StringType()),
    ("metric_name", StringType()),
    ("metric_type", StringType()),
    ("temporality", StringType()),
    ("is_monotonic", BooleanType()),
    ("unit", StringType()),
    ("value", DoubleType()),
    ("count", _U64),
    ("sum", DoubleType()),
    ("min", DoubleType()),
    ("max", DoubleType()),
    ("bucket_counts", ArrayType(_U64)),
    ("explicit_bounds", ArrayType(DoubleType())),
    ("exp_scale", IntegerType()),
    ("exp_zero_count", _U64),
    ("exp_zero_threshold", DoubleType()),
    ("exp_positive_offset", IntegerType()),
    ("exp_positive_bucket_counts", ArrayType(_U64)),
    ("exp_negative_offset", IntegerType()),
    ("exp_negative_bucket_counts", ArrayType(_U64)),
    ("quantiles", ArrayType(DoubleType())),
    ("quantile_values", ArrayType(DoubleType())),
    ("attributes", _STRING_MAP),
    ("resource_attributes", _STRING_MAP),
    ("scope_name", StringType()),
    ("scope_version", StringType()),
    ("terminating", BooleanType()),
    ("push_offset", LongType()),
)

PARTITION_COLUMNS: tuple[str, ...] = ("date", "hour")
"""Hive partition columns of the landing: ``date=YYYY-MM-DD/hour=HH`` (UTC of the data point)."""

LANDING_SCHEMA = StructType([StructField(name, kind, nullable=True) for name, kind in _FIELDS])
"""The columns stored in each landing file, in the writer's order."""


def landing_schema(*, with_partitions: bool = True) -> StructType:
    """The landing schema, by default with the partition columns a directory read adds.

    ``date`` stays a string (``2026-11-21``) so range pruning compares
    ISO dates lexically; ``hour`` is an integer (``hour=03`` reads as 3).
    """
    if not with_partitions:
        return LANDING_SCHEMA
    return StructType(
        [
            *LANDING_SCHEMA.fields,
            StructField("date", StringType(), nullable=True),
            StructField("hour", IntegerType(), nullable=True),
        ]
    )
