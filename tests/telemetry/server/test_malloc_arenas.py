"""The server caps glibc's malloc arenas: threads decoding big bodies share their freed memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from telemetry.server.malloc_arenas import SERVER_ARENAS, limit_malloc_arenas

# Eight threads allocate and free 4 MB buffers together, then glibc's own
# account (malloc_info) says how many arenas ("heaps") the process has.
_PROBE = textwrap.dedent(
    """
    import ctypes, json, sys, threading
    from telemetry.server.malloc_arenas import limit_malloc_arenas
    limited = limit_malloc_arenas() if sys.argv[1] == "limit" else False
    start = threading.Barrier(8)
    def churn():
        start.wait(10)
        for _ in range(50):
            buffers = [bytearray(4 << 20) for _ in range(2)]
            del buffers
    threads = [threading.Thread(target=churn) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    libc = ctypes.CDLL(None)
    libc.open_memstream.restype = ctypes.c_void_p
    memstream_args = (ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t))
    libc.open_memstream.argtypes = memstream_args
    libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.fclose.argtypes = (ctypes.c_void_p,)
    text, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(text), ctypes.byref(size))
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    print(json.dumps({"limited": limited, "heaps": text.value.decode().count("<heap nr=")}))
    """
)


def _heaps(mode: str, env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_threads_share_the_capped_arenas() -> None:
    unlimited = _heaps("default")
    limited = _heaps("limit")
    assert limited["limited"] is True
    assert limited["heaps"] == SERVER_ARENAS  # glibc's list: every arena, the main one first
    assert isinstance(unlimited["heaps"], int) and unlimited["heaps"] > SERVER_ARENAS


def test_an_operators_malloc_arena_max_is_left_to_glibc() -> None:
    chosen = _heaps("limit", {"MALLOC_ARENA_MAX": "4"})
    assert chosen["limited"] is False
    assert chosen["heaps"] == 4


def test_nothing_is_capped_when_the_operator_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")
    assert limit_malloc_arenas() is False
