"""Where a request's CPU goes: a thread-CPU cProfile of the server, grouped into stages.

``_cpu_profile.py`` writes the event loop thread's profile over a measured
window. Each function's own time (``tottime``) is given to one stage by the
rules below (module and function name); a function no rule names (a builtin,
the standard library) is given to the stage of whoever called it, edge by
edge, as pstats records callers. The profiler's own cost grows with the
number of calls, so a stage's share is a profile share: it is scaled to the
CPU measured without the profiler (``scale``), and the transport's cost (the
event loop's C code, the socket calls, which cProfile never sees) is the bare
responder's CPU per request measured in the same run.
"""

from __future__ import annotations

import json
import pstats
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import psutil  # type: ignore[import-untyped,unused-ignore]

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["KAFKA_STAGES", "OTLP_STAGES", "Breakdown", "breakdown", "kernel_cpu", "thread_cpu"]

#: (path fragment, function name or "*", stage); the first match wins.
_Rule = tuple[str, str, str]

_COMMON: Final[tuple[_Rule, ...]] = (
    ("crc32c", "*", "CRC32C"),
    ("telemetry/ingest/record.py", "*", "log append (record encode)"),
    ("telemetry/ingest/", "*", "log append"),
    ("zstandard", "*", "decompression"),
    ("lz4", "*", "decompression"),
    ("cramjam", "*", "decompression"),
    ("zlib", "*", "decompression"),
    ("gzip", "*", "decompression"),
    ("telemetry/core/codecs.py", "*", "decompression"),
    ("telemetry/enforcement/", "*", "quota record + check"),
    ("quotas/", "*", "quota record + check"),
    ("telemetry/core/", "*", "manager checks"),
    ("telemetry/ingress.py", "push_context", "log append"),
    ("telemetry/ingress.py", "*", "ingress flow"),
    ("telemetry/security/", "*", "security screen"),
    ("telemetry/kafka/authenticator.py", "*", "security screen"),
)

KAFKA_STAGES: Final[tuple[_Rule, ...]] = (
    ("telemetry/kafka/connection.py", "buffer_updated", "frame read"),
    ("telemetry/kafka/connection.py", "get_buffer", "frame read"),
    ("telemetry/kafka/connection.py", "_split_frames", "frame read"),
    ("telemetry/kafka/connection.py", "_count_held", "frame read"),
    ("telemetry/kafka/connection.py", "_repause", "frame read"),
    ("telemetry/enforcement/request_memory.py", "*", "frame read"),
    ("telemetry/kafka/connection.py", "_respond", "write"),
    ("telemetry/kafka/listener.py", "connection_active", "write"),
    ("telemetry/kafka/connection.py", "identify", "header/body decode"),
    ("telemetry/kafka/connection.py", "context", "header/body decode"),
    ("telemetry/kafka/connection.py", "*", "ordering + completion"),
    ("telemetry/kafka/pending.py", "*", "ordering + completion"),
    ("telemetry/kafka/apis.py", "_push_response", "response encode"),
    ("telemetry/kafka/apis.py", "_finish_request", "quota record + check"),
    ("telemetry/kafka/apis.py", "finish", "quota record + check"),
    ("telemetry/kafka/apis.py", "admit_instance_creation", "quota record + check"),
    ("telemetry/kafka/apis.py", "serve", "header/body decode"),
    ("telemetry/core/client_uuid.py", "from_bytes", "header/body decode"),
    ("uuid.py", "*", "header/body decode"),
    ("telemetry/wire/frames.py", "encode_response", "response encode"),
    ("telemetry/wire/", "encode", "response encode"),
    ("telemetry/wire/", "*", "header/body decode"),
    ("telemetry/kafka/", "*", "dispatch"),
    *_COMMON,
)

OTLP_STAGES: Final[tuple[_Rule, ...]] = (
    ("aiohttp/web_protocol.py", "*", "HTTP parse + serve (aiohttp)"),
    ("aiohttp/http_parser.py", "*", "HTTP parse + serve (aiohttp)"),
    ("aiohttp/streams.py", "*", "body read"),
    ("aiohttp/web_request.py", "read", "body read"),
    ("aiohttp/web_response.py", "*", "response encode + write"),
    ("aiohttp/http_writer.py", "*", "response encode + write"),
    ("aiohttp/", "*", "HTTP parse + serve (aiohttp)"),
    ("multidict", "*", "HTTP parse + serve (aiohttp)"),
    ("yarl", "*", "HTTP parse + serve (aiohttp)"),
    ("google/protobuf", "*", "protobuf decode + encode"),
    ("telemetry/http/otlp.py", "_parse", "protobuf decode + encode"),
    ("telemetry/http/otlp.py", "_encode", "protobuf decode + encode"),
    ("telemetry/http/otlp_wire.py", "*", "protobuf decode + encode"),
    ("telemetry/http/otlp_json.py", "*", "JSON decode"),
    ("json", "*", "JSON decode"),
    ("telemetry/http/identity.py", "*", "identity (resource attributes)"),
    ("telemetry/http/throttle.py", "*", "quota record + check"),
    ("telemetry/http/content.py", "*", "body read"),
    ("telemetry/http/", "*", "route + checks"),
    *_COMMON,
)

#: Callers followed up from an unnamed function before giving up ("other").
_MAX_DEPTH: Final = 6


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Profile shares by stage, and the figures they are scaled to."""

    requests: int
    shares: dict[str, float]
    #: Event-loop thread CPU per request without the profiler, µs.
    loop_us: float
    #: CPU per request of the server's other threads (log writer: writev + fdatasync), µs.
    threads_us: float
    #: The bare responder's CPU per request in the same run, µs: the transport
    #: (0: none measured; the profile shares then split all of ``loop_us``).
    transport_us: float

    def stage_us(self) -> dict[str, float]:
        """The loop's CPU beyond the transport, split by profile share; plus the threads."""
        python_us = max(self.loop_us - self.transport_us, 0.0)
        figures = {name: share * python_us for name, share in self.shares.items()}
        if self.transport_us > 0:
            figures["transport (event loop C code, socket calls; bare responder)"] = min(
                self.transport_us, self.loop_us
            )
        figures["fsync share (log writer thread: writev + fdatasync)"] = self.threads_us
        return figures

    def table(self, title: str) -> str:
        figures = self.stage_us()
        total = sum(figures.values())
        lines = [
            f"{title}: {total:,.1f} µs server CPU per request"
            f" (event loop {self.loop_us:,.1f} µs + other threads {self.threads_us:,.1f} µs;"
            f" profile over {self.requests:,} requests)",
            f"  {'stage':<62} {'µs':>7} {'share':>6}",
        ]
        for name, value in sorted(figures.items(), key=lambda item: -item[1]):
            lines.append(f"  {name:<62} {value:7.1f} {value / max(total, 1e-9):6.1%}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "loop_us": round(self.loop_us, 2),
            "threads_us": round(self.threads_us, 2),
            "transport_us": round(self.transport_us, 2),
            "stages_us": {k: round(v, 2) for k, v in self.stage_us().items()},
        }

    def write(self, directory: Path, name: str, title: str) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")
        path = directory / f"{name}.txt"
        path.write_text(self.table(title) + "\n")
        return path


# pstats' function key: (file, line, name); builtins are ("~", 0, "<built-in ...>").
_Func = tuple[str, int, str]


def _classify(func: _Func, rules: Sequence[_Rule]) -> str | None:
    path, _, name = func
    for fragment, function, stage in rules:
        in_module = fragment in path or (path == "~" and fragment in name)
        if in_module and (function in ("*", name) or name.startswith(function)):
            return stage
    return None


def _own_shares(stats: pstats.Stats, rules: Sequence[_Rule]) -> dict[str, float]:
    raw = stats.stats  # type: ignore[attr-defined]
    cache: dict[_Func, str | None] = {}

    def stage_of(func: _Func) -> str | None:
        if func not in cache:
            cache[func] = _classify(func, rules)
        return cache[func]

    seconds: dict[str, float] = defaultdict(float)

    def give(func: _Func, amount: float, depth: int) -> None:
        stage = stage_of(func)
        if stage is not None:
            seconds[stage] += amount
            return
        callers = raw[func][4] if func in raw else {}
        edges = {caller: edge[2] for caller, edge in callers.items()}
        spread = sum(edges.values())
        if depth >= _MAX_DEPTH or not edges or spread <= 0:
            seconds["other (event loop callbacks, unattributed)"] += amount
            return
        for caller, own in edges.items():
            give(caller, amount * own / spread, depth + 1)

    for func, (_, _, tottime, _, _) in raw.items():
        if tottime > 0:
            give(func, tottime, 0)
    total = sum(seconds.values()) or 1.0
    return {name: value / total for name, value in seconds.items()}


def breakdown(
    profile: Path,
    rules: Sequence[_Rule],
    *,
    requests: int,
    loop_us: float,
    threads_us: float,
    transport_us: float,
) -> Breakdown:
    """The stages of ``profile`` (pstats) scaled to the unprofiled figures given."""
    shares = _own_shares(pstats.Stats(str(profile)), rules)
    return Breakdown(requests, shares, loop_us, threads_us, transport_us)


def thread_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of a process's main thread (its event loop) and of all its other threads."""
    main = other = 0.0
    for thread in psutil.Process(pid).threads():
        cpu = float(thread.user_time + thread.system_time)
        if thread.id == pid:
            main += cpu
        else:
            other += cpu
    return main, other


def kernel_cpu(pid: int) -> tuple[float, float]:
    """The kernel's part of :func:`thread_cpu`: system CPU seconds, main thread and the others.

    For a push, the event loop's is mostly socket calls and the log writer's
    the copy into the page cache and ``fdatasync``.
    """
    main = other = 0.0
    for thread in psutil.Process(pid).threads():
        if thread.id == pid:
            main += float(thread.system_time)
        else:
            other += float(thread.system_time)
    return main, other
