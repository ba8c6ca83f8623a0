"""Cap glibc's malloc arenas, so memory freed after a big body goes back to the pool it came from.

Why: glibc gives each thread that allocates under contention an arena of
its own (up to eight per core), and memory freed in an arena stays mapped
for that arena. The server's threads (decoding threads, the log's writer,
executors) each decode or copy bodies of up to ``max_decompressed_bytes``,
so every arena ends up holding its own high-water mark: eight 16 MB zstd
bodies of empty resources, all refused, grew the server by 62-64 MiB
(``benchmarks/hostile_bench.py``), 23 MiB with two arenas. Two is the
setting long advised for threaded Python servers; ``MALLOC_ARENA_MAX`` in
the environment still wins (glibc reads it itself).
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Final

__all__ = ["SERVER_ARENAS", "limit_malloc_arenas"]

#: Arenas the server allows: the main one and one its threads share.
SERVER_ARENAS: Final = 2
_M_ARENA_MAX: Final = -8  # glibc malloc.h


def limit_malloc_arenas(arenas: int = SERVER_ARENAS) -> bool:
    """Cap this process's arenas at ``arenas``; ``False`` where glibc is absent or the user chose.

    Call it before the process starts threads: arenas made before stay.
    """
    if "MALLOC_ARENA_MAX" in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))
