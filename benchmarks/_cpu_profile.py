"""Run ``kip714 serve`` under cProfile counting the event loop thread's CPU time, not wall time.

Wall-clock profiles of a server on a loaded machine charge a function for the
time the kernel ran someone else; a thread-CPU clock does not. Profiling is off
until the first SIGUSR2 and stops, writing ``OUT`` (pstats), at the second, so a
profile covers exactly a measured window and none of the start-up.

    python benchmarks/_cpu_profile.py OUT serve --kafka-listen ...
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys
import time
from typing import Any


def main() -> None:
    out, argv = sys.argv[1], sys.argv[2:]
    profiler = cProfile.Profile(time.thread_time_ns, 1e-9)
    running = [False]

    def toggle(_signum: int, _frame: Any) -> None:
        if not running[0]:
            running[0] = True
            profiler.enable()
        else:
            profiler.disable()
            running[0] = False
            profiler.dump_stats(out + ".tmp")
            os.replace(out + ".tmp", out)  # whole or absent: the benchmark polls for it

    signal.signal(signal.SIGUSR2, toggle)
    from telemetry.cli.main import main as serve_main  # noqa: PLC0415

    raise SystemExit(serve_main(argv))


if __name__ == "__main__":
    main()
