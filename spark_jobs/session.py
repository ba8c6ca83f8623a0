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

from pyspark import SparkContext
from pyspark.find_spark_home import _find_spark_home
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
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""A small run's SQL settings: no adaptive re-planning of one-partition stages,
no shuffle before each Iceberg write to cluster rows by partition (a task
then writes every partition it holds: Iceberg's fanout writer), and no
generated code: every projection and stage is evaluated as it is planned
instead of compiled by Janino (itself cold code in a short run) for a few
thousand rows: about 2.2 s less driver CPU of 12 (docs/rollups.md)."""


def _under_spark_submit() -> bool:
    """``spark-submit`` starts the JVM first and hands PySpark its gateway port."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def iceberg_conf(lake: Lake, *, local: bool = False) -> dict[str, str]:
    """Jars, SQL extensions and the ``kip714`` catalog for a session this process starts.

    Under ``spark-submit`` the JVM already runs: jars and extensions must come
    from its ``--jars``/``--conf`` (docs/rollups.md), and only the catalog
    settings (runtime SQL settings) still apply.

    ``local``: the master is ``local[…]``, whose executor runs in the driver
    JVM: the jars go on that JVM's class path (``spark.driver.extraClassPath``)
    instead of ``spark.jars``. Why: ``spark.jars`` copies each jar into the
    executor's work directory at every start (the Iceberg runtime is 48 MB)
    and loads its classes through a class loader of Spark's, whose classes a
    class-data-sharing archive (``spark_jobs.class_archive``) cannot hold.
    """
    # Imported here so that `python -m spark_jobs.jars` runs a module not yet imported.
    from spark_jobs.jars import ICEBERG_PACKAGES, iceberg_jars  # noqa: PLC0415

    conf = {"spark.sql.extensions": ICEBERG_EXTENSIONS, **lake.spark_conf()}
    jars = iceberg_jars()
    if jars is None:
        conf["spark.jars.packages"] = ",".join(ICEBERG_PACKAGES)
    elif local:
        conf["spark.driver.extraClassPath"] = os.pathsep.join(str(jar) for jar in jars)
    else:
        conf["spark.jars"] = ",".join(str(jar) for jar in jars)
    return conf


def _spark_home() -> Path:
    """PySpark's Spark home, also exported for the launcher scripts this process runs.

    Why export it: without ``SPARK_HOME``, ``bin/spark-submit`` starts a
    second Python (``find_spark_home.py``, through ``python3``: a pyenv shim
    is a shell script of its own) only to find the same directory:
    0.2 to 1 s of a small run on this machine.
    """
    home: str = _find_spark_home()  # type: ignore[no-untyped-call]
    os.environ.setdefault("SPARK_HOME", home)
    return Path(home)


def _class_archive_options(spark_home: Path, extra_class_path: str) -> list[str]:
    """``class_archive.jvm_options`` for the driver's class path: its extra jars, then Spark's."""
    from spark_jobs import class_archive  # noqa: PLC0415

    extra = [Path(jar) for jar in extra_class_path.split(os.pathsep) if jar]
    return class_archive.jvm_options([*extra, *sorted((spark_home / "jars").glob("*.jar"))])


def spark_session(
    master: str | None = None,
    *,
    lake: Lake | None = None,
    app_name: str = "kip714-rollup",
    shuffle_partitions: int = 4,
    driver_memory: str = "1g",
    small_input: bool = False,
    class_archive: bool = False,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Get (or create) the job's session.

    ``master`` wins when given. Otherwise ``spark-submit``'s own master is
    kept, and a plain ``python`` run gets ``local[*]``. ``driver_memory`` only
    takes effect when this call starts the JVM (a plain ``python`` run).
    ``small_input``: the start-up and SQL settings of a small run (above).
    ``class_archive``: when this call starts the JVM, start it from the
    cached class-data-sharing archive, or have it write one at exit
    (``spark_jobs.class_archive``).
    """
    builder = SparkSession.builder.appName(app_name)
    if master is None and not _under_spark_submit():
        master = DEFAULT_MASTER
    if master is not None:
        builder = builder.master(master)
    local = master is not None and master.startswith("local")
    catalog = {} if lake is None else iceberg_conf(lake, local=local)
    java_options = [f"-Dlog4j2.configurationFile=file:{_LOG4J}"]
    if small_input:
        java_options.append(SMALL_INPUT_JVM_OPTIONS)
    if not _under_spark_submit() and SparkContext._gateway is None:  # this call starts the JVM
        spark_home = _spark_home()
        if class_archive:
            extra = catalog.get("spark.driver.extraClassPath", "")
            java_options += _class_archive_options(spark_home, extra)
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        # Hourly gauge percentiles are an object aggregation (collect_list) over
        # tens of thousands of small groups per task: keep it in memory instead of
        # falling back to sort-based aggregation after 128 keys (2x faster, measured).
        "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "65536",
        # An aggregation whose input is already sorted by its keys (the 1-minute
        # gauges, after their window) streams over it instead of hashing every
        # group: about one point per group there, so the hash map was all cost.
        "spark.sql.execution.replaceHashWithSortAgg": "true",
        # HotSpot does not JIT-compile a method over 8,000 bytes of bytecode: a
        # larger whole-stage method (the histogram percentiles' projection over
        # the merged buckets) ran interpreted, 40 % of that rollup's time. Spark's
        # own advice for HotSpot: at this limit it compiles the subtree in smaller
        # pieces instead (docs/rollups.md "Performance").
        "spark.sql.codegen.hugeMethodLimit": "8000",
        # The persisted 1-minute sums and histograms (DISK_ONLY) are cached column
        # batches; compressing them tried every encoding on every column of every
        # batch, about a fifth of those rollups' time, for 8-13 % less disk (47.3
        # against 53.4 MiB for the sums at 10M points; docs/rollups.md "Performance").
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.driver.memory": driver_memory,
        "spark.driver.extraJavaOptions": " ".join(java_options),
        **(SMALL_INPUT_CONF if small_input else {}),
        **catalog,
        **(extra_conf or {}),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
