"""A quiet SparkSession for kip714 jobs, in local mode unless told otherwise.

Why these settings (measured on 2 cores): the UI and the
console progress bars only add noise to a batch job's output; UTC makes
``date``/``hour`` partitions and window boundaries independent of the
machine's zone; a handful of shuffle partitions (AQE on) beats the default
200 on small hourly inputs; and a 1 GiB driver runs the rollups as fast as
4 GiB with a third of the peak memory. Spark's own log lines are cut to
errors by a bundled log4j2 file, passed before the JVM starts, so even the
startup banner stays away from the user's terminal.
"""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

from spark_jobs.lake import Lake

__all__ = ["DEFAULT_MASTER", "ICEBERG_EXTENSIONS", "iceberg_conf", "spark_session"]

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"

DEFAULT_MASTER = "local[*]"
"""Used when neither ``--master`` nor ``spark-submit`` names a master."""

_LOG4J = Path(__file__).with_name("log4j2.properties")

SMALL_INPUT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""A small run's JVM: C1 only, serial GC.

Why: a run over a few thousand points spends its time in cold JVM code
(analysis, planning, commits), where C2's compilations never pay back;
halving the run (measured, docs/rollups.md). Only when this process starts
the JVM; a long run on big inputs needs C2.
"""

SMALL_INPUT_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.iceberg.distribution-mode": "none",
}
"""A small run's SQL settings: no adaptive re-planning of one-partition stages,
and no shuffle before each Iceberg write to cluster rows by partition (a
task then writes every partition it holds: Iceberg's fanout writer)."""


def _under_spark_submit() -> bool:
    """``spark-submit`` starts the JVM first and hands PySpark its gateway port."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def iceberg_conf(lake: Lake) -> dict[str, str]:
    """Jars, SQL extensions and the ``kip714`` catalog for a session this process starts.

    Under ``spark-submit`` the JVM already runs: jars and extensions must come
    from its ``--jars``/``--conf`` (docs/rollups.md), and only the catalog
    settings (runtime SQL settings) still apply.
    """
    # Imported here so that `python -m spark_jobs.jars` runs a module not yet imported.
    from spark_jobs.jars import ICEBERG_PACKAGES, iceberg_jars  # noqa: PLC0415

    conf = {"spark.sql.extensions": ICEBERG_EXTENSIONS, **lake.spark_conf()}
    jars = iceberg_jars()
    if jars is None:
        conf["spark.jars.packages"] = ",".join(ICEBERG_PACKAGES)
    else:
        conf["spark.jars"] = ",".join(str(jar) for jar in jars)
    return conf


def spark_session(
    master: str | None = None,
    *,
    lake: Lake | None = None,
    app_name: str = "kip714-rollup",
    shuffle_partitions: int = 4,
    driver_memory: str = "1g",
    small_input: bool = False,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Get (or create) the job's session.

    ``master`` wins when given. Otherwise ``spark-submit``'s own master is
    kept, and a plain ``python`` run gets ``local[*]``. ``driver_memory`` only
    takes effect when this call starts the JVM (a plain ``python`` run).
    ``small_input``: the start-up and SQL settings of a small run (above).
    """
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif not _under_spark_submit():
        builder = builder.master(DEFAULT_MASTER)
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        # File sources only (the landing is read through Iceberg, whose splits follow
        # Parquet row groups): one split per file or 8 MiB of it, not one per core.
        # It kept the cache blocks of the projection the job used to persist small.
        "spark.sql.files.maxPartitionBytes": "8m",
        # Hourly gauge percentiles are an object aggregation (collect_list) over
        # tens of thousands of small groups per task: keep it in memory instead of
        # falling back to sort-based aggregation after 128 keys (2x faster, measured).
        "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "65536",
        "spark.driver.memory": driver_memory,
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_LOG4J}"
        + (f" {SMALL_INPUT_JVM_OPTIONS}" if small_input else ""),
        **(SMALL_INPUT_CONF if small_input else {}),
        **(iceberg_conf(lake) if lake is not None else {}),
        **(extra_conf or {}),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
