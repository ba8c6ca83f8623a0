"""spark-submit on a standalone cluster (a master, two workers) == local mode, row for row."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

import spark_jobs
from spark_jobs.jars import iceberg_jars
from spark_jobs.job import main, output_names
from spark_jobs.lake import Lake
from spark_jobs.session import SMALL_INPUT_JVM_OPTIONS
from tests.spark_jobs.lake_writer import append_rows
from tests.spark_jobs.landing_data import two_hours
from tests.spark_jobs.standalone import SPARK_HOME, spark_env, standalone_cluster
from tests.spark_jobs.support import at, point

RANGE = ["--from", "2026-11-21T04:00Z", "--to", "2026-11-21T06:00Z"]
KNOWN_BAD_2_16 = """
[[rule]]
name = "software_known_bad"
metric = "kip714.client.software_known_bad"
aggregation = "last"
op = "=="
threshold = 1
for_s = 0
severity = "critical"
meaning = "known-bad software"

[[known_bad]]
library = "librdkafka"
first = "2.16.0"
last = "2.16.0"
reason = "the tests' points say librdkafka 2.16.0"
"""
PACKAGE = Path(spark_jobs.__file__).parent


def landing() -> list[dict[str, object]]:
    counters = [
        point(time=at(m, hour=h), metric_name="s", metric_type="sum", temporality="cumulative",
              is_monotonic=True, start_time=at(0), value=float(h * 60 + m), client_id="p1",
              client_instance_id="p1-i")
        for h in (4, 5) for m in range(0, 60, 7)
    ]  # fmt: skip
    byte_rates = [  # quota_advice_1h's demand
        point(time=at(m, hour=h), metric_name="org.apache.kafka.producer.outgoing.byte.rate",
              value=float(100 * m), client_id="p1", client_instance_id="p1-i",
              principal="User:alice")
        for h in (4, 5) for m in range(0, 60, 10)
    ]  # fmt: skip
    return [*two_hours(), *counters, *byte_rates]


def package_zip(tmp_path: Path) -> Path:
    """``spark_jobs`` and the ``health_rules`` it reads, as the ``--py-files`` archive."""
    archive = tmp_path / "spark_jobs.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for package in (PACKAGE, PACKAGE.parent / "health_rules"):
            for path in package.rglob("*"):
                if path.is_file() and "__pycache__" not in path.parts:
                    out.write(path, Path(package.name) / path.relative_to(package))
    return archive


@pytest.mark.timeout(900)  # a master, a worker and a driver JVM: slow on a loaded machine
def test_spark_submit_on_a_standalone_cluster_equals_local_mode(
    spark: SparkSession, lake: Lake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_cluster = Lake(lake.catalog_uri, lake.warehouse, lake.namespace + "_cluster")
    for target in (lake, on_cluster):
        append_rows(target, landing())
    data_dir = str(lake.catalog_file.parent.parent)
    rules = (
        tmp_path / "rules.toml"
    )  # the test clients' librdkafka is "known bad": alerts to compare
    rules.write_text(KNOWN_BAD_2_16)
    alert_rules = ["--alert-rules", str(rules)]
    assert main(["--data-dir", data_dir, "--namespace", lake.namespace, *RANGE, *alert_rules]) == 0
    capsys.readouterr()

    jars = iceberg_jars()
    assert jars is not None
    with standalone_cluster(tmp_path / "cluster") as master:
        command = [
            str(SPARK_HOME / "bin" / "spark-submit"), "--master", master,
            "--jars", ",".join(map(str, jars)), "--py-files", str(package_zip(tmp_path)),
            "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m",
            "--conf", f"spark.driver.extraJavaOptions={SMALL_INPUT_JVM_OPTIONS}",
            "--conf", f"spark.executor.extraJavaOptions={SMALL_INPUT_JVM_OPTIONS}",
            "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            str(PACKAGE / "job.py"), "--data-dir", data_dir,
            "--namespace", on_cluster.namespace, *RANGE, *alert_rules,
        ]  # fmt: skip
        result = subprocess.run(command, env=spark_env(tmp_path / "cluster"), capture_output=True,
                                text=True, timeout=600, check=False)  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        assert "data points read" in result.stdout
    logs = {p.name: p.read_text(errors="replace") for p in (tmp_path / "cluster").glob("*.log")}
    assert "Registered app kip714-rollup" in logs["master.log"]
    for worker in ("worker-0.log", "worker-1.log"):
        assert "Asked to launch executor" in logs[worker], worker

    for name in output_names([60, 3600]):
        local_rows = spark.table(lake.table(name))
        assert local_rows.count() > 0, name
        assertDataFrameEqual(spark.table(on_cluster.table(name)), local_rows, rtol=1e-12)
