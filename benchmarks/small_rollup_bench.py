"""``kip714 rollup`` on a small lake, run as a new user runs it: wall clock per command.

The lake: 3,060 points landed through pyiceberg (``tests/spark_jobs/lake_writer.py``)
in the hour before now: 17 producers pushing every 2 minutes, 30 pushes each;
per push three per-broker latency gauges, one gauge without a value (the
510 points the summary names as left out), one cumulative sum and one delta
histogram. Each round copies that lake afresh and times, as subprocesses,
the first run (which creates the eight output tables), an empty range
(refused before any JVM starts) and a rerun (which replaces the windows).
``--baseline PYTHON:TREE`` alternates another checkout's code with this one,
round by round, on copies of the same lake.

    python benchmarks/small_rollup_bench.py --rounds 2
    python benchmarks/small_rollup_bench.py --baseline /work/venvs/main/bin/python:/work/main
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from spark_jobs.lake import Lake
from tests.spark_jobs.lake_writer import append_rows
from tests.spark_jobs.support import point

HERE = Path(__file__).resolve().parent.parent
PRODUCERS = 17
PUSHES = 30
P = "org.apache.kafka.producer."
EMPTY_RANGE = ["--from", "2020-01-01T00:00Z", "--to", "2020-01-01T01:00Z"]


def make_lake(data: Path) -> int:
    """The small lake under ``data``; returns the points landed."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    rows: list[dict[str, Any]] = []
    for push in range(PUSHES):
        at = now - timedelta(minutes=2 * push)
        for client in range(PRODUCERS):
            common = {"client_id": f"p{client}", "client_instance_id": f"p{client}-i",
                      "push_offset": push + 1, "time": at}  # fmt: skip
            for node in ("1", "2", "3"):
                rows.append(point(metric_name=P + "node.request.latency.avg",
                                  value=float(client + push), attributes={"node.id": node},
                                  **common))  # fmt: skip
            rows.append(point(metric_name=P + "record.queue.time.avg", value=None, **common))
            rows.append(point(metric_name=P + "connection.creation.total", metric_type="sum",
                              temporality="cumulative", is_monotonic=True, value=float(push),
                              **common))  # fmt: skip
            rows.append(point(metric_name="h", metric_type="histogram", temporality="delta",
                              count=2, sum=3.0, bucket_counts=[1, 1], explicit_bounds=[1.0],
                              **common))  # fmt: skip
    append_rows(Lake.under(data), rows)
    return len(rows)


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def timed(python: str, tree: Path, argv: list[str]) -> tuple[float, int, str]:
    """Wall seconds, exit status and first output line of ``python -m telemetry rollup …``."""
    start = time.monotonic()
    result = subprocess.run(
        [python, "-m", "telemetry", "rollup", *argv], cwd=tree, capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip
    lines = (result.stdout or result.stderr).splitlines()
    return time.monotonic() - start, result.returncode, lines[0] if lines else ""


def round_of(name: str, python: str, tree: Path, pristine: Path, work: Path) -> None:
    data = work / name
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(pristine, data)
    before = load()
    first = timed(python, tree, ["--data-dir", str(data)])
    empty = timed(python, tree, ["--data-dir", str(data), *EMPTY_RANGE])
    rerun = timed(python, tree, ["--data-dir", str(data)])
    print(f"{name:>10}: first run {first[0]:5.1f} s (exit {first[1]}), "
          f"empty range {empty[0]:4.2f} s (exit {empty[1]}), "
          f"rerun {rerun[0]:5.1f} s (exit {rerun[1]}), load {before} -> {load()}",
          flush=True)  # fmt: skip
    if first[1] != 0:
        print(f"            {first[2]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", help="PYTHON:TREE of the code to compare with")
    args = parser.parse_args()
    variants = [("this tree", sys.executable, HERE)]
    if args.baseline:
        python, _, tree = args.baseline.partition(":")
        variants.insert(0, ("baseline", python, Path(tree)))
    with tempfile.TemporaryDirectory(prefix="kip714-small-") as scratch:
        work = Path(scratch)
        print(f"{make_lake(work / 'pristine')} points landed; "
              f"KIP714_CACHE={os.environ.get('KIP714_CACHE', '~/.cache/kip714')}")  # fmt: skip
        for number in range(1, args.rounds + 1):
            for name, python, tree in variants:
                round_of(f"{name} {number}", python, tree, work / "pristine", work)


if __name__ == "__main__":
    main()
