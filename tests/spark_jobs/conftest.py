"""One SparkSession for the whole Spark test run (local[1], 1 shuffle partition) on one lake.

It starts as the job starts a small run (``session.SMALL_INPUT_*``): every
test's input is a few hundred rows, and a C1-only JVM runs them in half the time.

The session's ``kip714`` catalog is one SQLite file for the whole run (Spark
loads a catalog once per session); each test gets its own namespace in it,
so tests never see each other's tables.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import spark_jobs
from spark_jobs.lake import Lake
from spark_jobs.session import SMALL_INPUT_CONF, SMALL_INPUT_JVM_OPTIONS, iceberg_conf

LOG4J = Path(spark_jobs.__file__).with_name("log4j2.properties")
_NAMESPACES = itertools.count()


@pytest.fixture(scope="session")
def lake_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory whose ``lake/`` holds the session's catalog and warehouse."""
    return tmp_path_factory.mktemp("kip714-data")


@pytest.fixture
def lake(lake_dir: Path) -> Lake:
    """The session's lake, with a namespace of this test's own."""
    return Lake.under(lake_dir, namespace=f"t{next(_NAMESPACES)}")


@pytest.fixture(scope="session")
def spark(lake_dir: Path) -> Iterator[SparkSession]:
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("kip714-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config(
            "spark.driver.extraJavaOptions",
            f"-Duser.timezone=UTC -Dlog4j2.configurationFile=file:{LOG4J} "
            + SMALL_INPUT_JVM_OPTIONS,
        )
        .config("spark.driver.memory", "1g")
    )
    catalog = iceberg_conf(Lake.under(lake_dir), local=True)  # the jars on the class path
    for key, value in {**SMALL_INPUT_CONF, **catalog}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# pyspark 4.1's collect() leaves its result socket to the garbage collector
# ("The socket will be automatically closed when garbage-collected", pyspark/util.py),
# which raises a ResourceWarning at every collect under filterwarnings=error.
# Ignored for the Spark tests only, and only that socket warning.
_PYSPARK_SOCKET = pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(_PYSPARK_SOCKET)
