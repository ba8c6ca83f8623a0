"""The lake's worker process: flattens logged pushes and writes the lake's data files.

Flattening and Parquet encoding (the costly steps) run here, not in the
server process, so acknowledgements stay fast; the server only hands over
batches and commits the files a worker reports. Messages, in order, over a
``multiprocessing`` pipe (``exporters.parquet.pool.WorkerHandle`` keeps a
FIFO of futures, so every request gets exactly one reply, in order):

* ``("batch", [LoggedPush fields as a tuple, ...], metrics_from, pushes_from)``
  → ``("done", BatchReply)``
* ``("write", first, last)`` → ``("written", [WrittenFile, ...])``
* ``("stop",)`` → ``("stopped",)``, then the process exits
* anything that fails → ``("error", traceback)``; the worker is then
  poisoned and refuses to write, so a generation missing a batch is never
  committed.

A worker whose parent dies sees EOF and exits; files it wrote and nobody
committed are orphans, never read, removed by orphan cleanup.
"""

from __future__ import annotations

import signal
import traceback
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from exporters.api import LoggedPush
from exporters.iceberg.rows import LakeRows, LaneConfig

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

__all__ = ["worker_main"]


def worker_main(conn: Connection, config: LaneConfig) -> None:
    """Entry point of a worker process; serves requests until ``stop`` or EOF."""
    # The server handles SIGINT/SIGTERM and tells us when to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pa.set_memory_pool(pa.system_memory_pool())
    lane = LakeRows(config)
    poisoned: str | None = None
    try:
        while True:
            try:
                message: tuple[Any, ...] = conn.recv()
            except (EOFError, OSError):
                return  # the parent is gone
            kind = message[0]
            if kind == "stop":
                conn.send(("stopped",))
                return
            try:
                if poisoned is not None:
                    raise RuntimeError(f"worker is poisoned: {poisoned}")
                if kind == "batch":
                    pushes = [LoggedPush(*fields) for fields in message[1]]
                    reply: tuple[Any, ...] = ("done", lane.batch(pushes, message[2], message[3]))
                elif kind == "write":
                    reply = ("written", lane.write(message[1], message[2]))
                else:
                    raise ValueError(f"unknown request {kind!r}")
            except Exception:
                poisoned = poisoned or traceback.format_exc(limit=8)
                lane.discard()
                reply = ("error", poisoned)
            conn.send(reply)
    finally:
        conn.close()
