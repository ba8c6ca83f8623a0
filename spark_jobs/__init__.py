"""PySpark rollups over the Parquet landing; reads nothing but Parquet.

May import pyspark and pyarrow, never ``quotas``, ``telemetry`` or
``exporters`` (import-linter): the landing schema is its only contract with
the server, restated in ``spark_jobs.schema`` and contract-tested.

The entry points live in their modules and are not re-exported, so that
``python -m spark_jobs.job`` and ``python -m spark_jobs.compaction`` run a
module the package has not imported yet: ``spark_jobs.job.main(argv)`` and
``spark_jobs.compaction.main(argv)``.
"""

from __future__ import annotations

from spark_jobs.io import (
    DataDirNotFoundError,
    HourBusyError,
    NoDataError,
    read_landing,
    write_rollup,
)
from spark_jobs.rollups import (
    client_health,
    gauge_rollup,
    histogram_rollup,
    normalise_node_id,
    sum_rollup,
    top_n,
    unrolled_points,
)
from spark_jobs.schema import LANDING_SCHEMA, landing_schema
from spark_jobs.session import spark_session

__all__ = [
    "LANDING_SCHEMA",
    "DataDirNotFoundError",
    "HourBusyError",
    "NoDataError",
    "client_health",
    "gauge_rollup",
    "histogram_rollup",
    "landing_schema",
    "normalise_node_id",
    "read_landing",
    "spark_session",
    "sum_rollup",
    "top_n",
    "unrolled_points",
    "write_rollup",
]
