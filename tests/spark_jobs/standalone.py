"""A Spark standalone cluster on loopback: one master and two workers from the pyspark wheel.

The wheel ships ``bin/spark-class`` but no ``sbin/`` scripts, so the
daemons are started as the scripts would: ``spark-class
org.apache.spark.deploy.master.Master`` and ``…deploy.worker.Worker``, on
127.0.0.1 with ephemeral ports (the master's is read from its log), small
daemon heaps and one core and 512 MiB per worker.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

from spark_jobs.session import SMALL_INPUT_JVM_OPTIONS

SPARK_HOME = Path(pyspark.__file__).parent
_MASTER_URL = re.compile(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")
_REGISTERED = re.compile(r"Registering worker 127\.0\.0\.1:\d+ with 1 cores")
_START_TIMEOUT_S = 120.0
_STOP_TIMEOUT_S = 20.0


def spark_env(workdir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": SMALL_INPUT_JVM_OPTIONS,
        "SPARK_LOG_DIR": str(workdir),
        "SPARK_WORKER_DIR": str(workdir / "work"),
    }


def _wait_for(
    log: Path, pattern: re.Pattern[str], count: int, process: subprocess.Popen[bytes]
) -> list[str]:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = pattern.findall(log.read_text(errors="replace")) if log.exists() else []
        if len(found) >= count:
            return [str(f) for f in found]
        if process.poll() is not None:
            raise AssertionError(f"{process.args!r} exited:\n{log.read_text(errors='replace')}")
        time.sleep(0.2)
    raise AssertionError(f"{pattern.pattern!r} not in {log} within {_START_TIMEOUT_S:.0f} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=_STOP_TIMEOUT_S)


@contextmanager
def standalone_cluster(workdir: Path, workers: int = 2) -> Iterator[str]:
    """Start the cluster; yields the master URL; stops every daemon it started."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = spark_env(workdir)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = workdir / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [spark_class, *args], env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        processes.append(process)
        return process, log

    try:
        loopback = ("--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        master, master_log = start("master", "org.apache.spark.deploy.master.Master", *loopback)
        url = _wait_for(master_log, _MASTER_URL, 1, master)[0]
        for k in range(workers):
            worker = ("--cores", "1", "--memory", "512m", "--work-dir", str(workdir / f"work-{k}"))
            start(f"worker-{k}", "org.apache.spark.deploy.worker.Worker", url, *loopback, *worker)
        _wait_for(master_log, _REGISTERED, workers, master)
        yield url
    finally:
        for process in reversed(processes):
            _stop(process)
