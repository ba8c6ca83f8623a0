"""The lake's worker process: flattens logged pushes and writes the lake's data files.

Flattening and Parquet encoding (the costly steps) run here, not in the
server process, so acknowledgements stay fast; the server only hands over
batches and commits the files a worker reports. Messages, in order, over a
``multiprocessing`` pipe (``exporters.landing.pool.WorkerHandle`` keeps a
FIFO of futures, so every request gets exactly one reply, in order):

* ``("batch", [LoggedPush fields as a tuple, ...], metrics_from, pushes_from)``
  → ``("done", BatchReply)``
* ``("write", first, last)`` → ``("written", [WrittenFile, ...], BatchReply)`` (the
  reply: the pushes gathered since the last flattening, flattened before writing)
* ``("stop",)`` → ``("stopped",)``, then the process exits
* anything that fails → ``("error", traceback)``; the worker is then
  poisoned and refuses to write, so a generation missing a batch is never
  committed.

A worker whose parent dies sees EOF and exits; files it wrote and nobody
committed are orphans, never read, removed by orphan cleanup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporters.api import LoggedPush
from exporters.iceberg.rows import LakeRows, LaneConfig
from exporters.landing.pool import serve_requests

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

__all__ = ["worker_main"]


def worker_main(conn: Connection, config: LaneConfig) -> None:
    """Entry point of a worker process; serves requests until ``stop`` or EOF."""
    lane = LakeRows(config)
    serve_requests(
        conn,
        {
            "batch": lambda m: ("done", lane.batch([LoggedPush(*f) for f in m[1]], m[2], m[3])),
            "write": lambda m: ("written", *lane.write(m[1], m[2])),
        },
        lambda _reason: lane.discard(),
        lane.discard,
    )
