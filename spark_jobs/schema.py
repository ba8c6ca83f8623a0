"""The landing table's schema as Spark reads it from Iceberg.

``spark_jobs`` may not import ``exporters``, so the landing's columns are
stated a second time here; ``tests/spark_jobs/test_schema_contract.py``
compares them with the landing writer's and with what Spark reads from a
real table, which is the only place the definitions meet.

Iceberg types, not Parquet's: times are ``timestamptz`` (µs) and read as
``TimestampType``; the counts the OTLP payload carries as unsigned 64-bit
(``count``, ``bucket_counts``, ...) are ``long``; ``node_id`` is the broker a
per-broker metric describes, already decoded from the attributes by the
landing, ``ingest_node`` the kip714 node that landed the row,
``log_partition`` the pushes topic's partition (null for a local log), and
``push_bytes`` / ``push_decoded_bytes`` the push's size as sent and
decompressed (null in rows an earlier version landed).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["LANDING_SCHEMA"]

_U64: DataType = LongType()
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
    ("node_id", StringType()),
    ("ingest_node", StringType()),
    ("log_partition", IntegerType()),
    ("push_bytes", LongType()),
    ("push_decoded_bytes", LongType()),
)

LANDING_SCHEMA = StructType([StructField(name, kind, nullable=True) for name, kind in _FIELDS])
"""The landing table's columns, in the writer's order."""
