"""Run by ``test_crash.py`` in a child process: append until killed.

Prints ``<offset> <seq>`` for every acknowledged append, flushed at once, so
the parent knows exactly what was acknowledged when the process dies.

    python3 crash_writer.py DIRECTORY MAX_APPENDS [TEAR_AT_GROUP]

With ``TEAR_AT_GROUP`` the process kills itself with SIGKILL in the middle of
that group's write, halfway into its first record: a crash that leaves a torn
record on disk, which a kill from outside almost never does (a ``writev`` to a
regular file is not interrupted by signals).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import TYPE_CHECKING

from telemetry.ingest import IngestLog, LogConfig, PushContext, writer

if TYPE_CHECKING:
    from collections.abc import Sequence

APPENDERS = 16
CONFIG = LogConfig(segment_bytes=64 * 1024, max_bytes=1 << 30)


def crash_payload(seq: int) -> bytes:
    """Varying sizes (1-6 KiB) so kills land at every point of a frame."""
    size = 1024 + (seq * 397) % 5120
    unit = seq.to_bytes(8, "big")
    return (unit * (size // 8 + 1))[:size]


def crash_context(seq: int) -> PushContext:
    return PushContext(
        client_instance_id="Vm2qkwYbRUCMcOiPSuDS0A",
        subscription_id=seq,
        received_time_ms=1_700_000_000_000 + seq,
        push_interval_ms=1000,
        client_id=f"crash-{seq}",
    )


async def _main(directory: str, max_appends: int) -> None:
    log = await IngestLog.open(directory, CONFIG)
    await log.register("never-commits")  # keeps every segment for the check
    next_seq = iter(range(max_appends))
    out = sys.stdout

    async def appender() -> None:
        for seq in next_seq:
            offset = await log.append(crash_context(seq), crash_payload(seq))
            out.write(f"{offset} {seq}\n")
            out.flush()

    await asyncio.gather(*(appender() for _ in range(APPENDERS)))
    await log.close()


def _tear_at(group: int) -> None:
    real_write_all = writer.write_all
    calls = [0]

    def tearing_write_all(fd: int, parts: Sequence[bytes | memoryview]) -> None:
        calls[0] += 1
        if calls[0] == group:
            # The group's first frame (head, payload) cut inside its payload.
            os.write(fd, bytes(parts[0]) + bytes(parts[1])[: len(parts[1]) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        real_write_all(fd, parts)

    writer.write_all = tearing_write_all


if __name__ == "__main__":
    if len(sys.argv) > 3:
        _tear_at(int(sys.argv[3]))
    asyncio.run(_main(sys.argv[1], int(sys.argv[2])))
