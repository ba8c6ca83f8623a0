"""PySpark rollups over the kip714 lake: the Iceberg landing table in, Iceberg rollup tables out.

May import pyspark, pyiceberg and pyarrow, never ``quotas``, ``telemetry``
or ``exporters`` (import-linter): the landing table's schema is its only
contract with the server, restated in ``spark_jobs.schema`` and
contract-tested.

The entry point lives in its module and is not re-exported, so that
``python -m spark_jobs.job`` runs a module the package has not imported yet:
``spark_jobs.job.main(argv)``. The names below load on first use (PEP 562):
importing the package must not import PySpark, or the job's pre-flight,
which answers an empty range from metadata alone, would pay for it.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from spark_jobs.io import read_landing, write_output
    from spark_jobs.lake import Lake, NoDataError
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

_HOMES = {
    "LANDING_SCHEMA": "spark_jobs.schema",
    "Lake": "spark_jobs.lake",
    "NoDataError": "spark_jobs.lake",
    "client_health": "spark_jobs.rollups",
    "gauge_rollup": "spark_jobs.rollups",
    "histogram_rollup": "spark_jobs.rollups",
    "read_landing": "spark_jobs.io",
    "spark_session": "spark_jobs.session",
    "sum_rollup": "spark_jobs.rollups",
    "top_n": "spark_jobs.rollups",
    "unrolled_points": "spark_jobs.rollups",
    "write_output": "spark_jobs.io",
}

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


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'spark_jobs' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    """The lazy names too, so ``dir(spark_jobs)`` lists what ``__all__`` promises."""
    return sorted({*globals(), *__all__})
