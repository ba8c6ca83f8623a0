"""PySpark rollups over the kip714 lake: the Iceberg landing table in, Iceberg rollup tables out.

May import pyspark, pyiceberg and pyarrow, never ``quotas``, ``telemetry``
or ``exporters`` (import-linter): the landing table's schema is its only
contract with the server, restated in ``spark_jobs.schema`` and
contract-tested.

The entry point lives in its module and is not re-exported, so that
``python -m spark_jobs.job`` runs a module the package has not imported yet:
``spark_jobs.job.main(argv)``.
"""

from __future__ import annotations

from spark_jobs.io import NoDataError, read_landing, write_output
from spark_jobs.lake import Lake
from spark_jobs.rollups import (
    client_health,
    gauge_rollup,
    histogram_rollup,
    sum_rollup,
    top_n,
    unrolled_points,
)
from spark_jobs.schema import LANDING_SCHEMA
from spark_jobs.session import spark_session

__all__ = [
    "LANDING_SCHEMA",
    "Lake",
    "NoDataError",
    "client_health",
    "gauge_rollup",
    "histogram_rollup",
    "read_landing",
    "spark_session",
    "sum_rollup",
    "top_n",
    "unrolled_points",
    "write_output",
]
