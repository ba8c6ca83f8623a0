"""Do large decompressions stall other clients? Ordinary latency with and without a heavy one.

One run, two phases against the same ``kip714 serve`` (a subprocess, durable
ingest log, no exporter):

1. **baseline**: ``--clients`` ordinary simulated clients (``_loadgen``,
   librdkafka-shaped 60-metric zstd pushes, open loop at ``--rate`` pushes/s,
   latency from the intended send time) and nothing else;
2. **with a heavy client**: the same load while one more client, in its own
   process, pushes as fast as it can: a fresh instance each time (GET with
   the zero id, then push, which the gate always lets through), each push
   ~1 MiB of zstd (a frame without content size, as librdkafka writes)
   expanding to ``--heavy-expands-to`` bytes. By default that is the
   decompression bound plus one byte: the whole 16 MiB is produced, then the
   push is refused with TELEMETRY_TOO_LARGE (118), so the phase measures the
   decompression and nothing of the ingest log's handling of 16 MiB records.

Both phases print p50/p99 of the ordinary clients; the target is p99 below
20 ms with the heavy client. The load generators share the machine's cores
with the server (the output says how many).

    python3 benchmarks/heavy_push_bench.py            # about 40 s
    python3 benchmarks/heavy_push_bench.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import socket
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Final

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import LoadSpec, PhaseResult, percentile, run_load
from ack_bench import Kip714Server, workdir

from telemetry.wire import (
    ApiKey,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
    RequestHeader,
    decode_response,
    encode_request,
)

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event

HOST: Final = "127.0.0.1"
MIB: Final = 1024 * 1024
BOUND: Final = 16 * MIB  # the default [telemetry] max_decompressed_bytes
TARGET_P99_S: Final = 0.020
_SIZE: Final = struct.Struct(">i")


def heavy_payload(expands_to: int, seed: int = 714) -> bytes:
    """zstd without content size, just under 1 MiB, expanding to ``expands_to`` bytes.

    A random block just under 1 MiB (incompressible) repeated: zstd's window
    (8 MiB here, within what the server allows) reaches back over it, so each
    repeat costs a few bytes.
    """
    block = random.Random(seed).randbytes(MIB - 64 * 1024)
    data = (block * (expands_to // len(block) + 1))[:expands_to]
    params = zstandard.ZstdCompressionParameters.from_level(
        3, window_log=23, write_content_size=False
    )
    compressor = zstandard.ZstdCompressor(compression_params=params)
    frame = compressor.compress(data)
    assert len(frame) <= MIB, len(frame)
    return frame


def _call(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    (size,) = _SIZE.unpack(_read(sock, 4))
    return _read(sock, size)


def _read(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("server closed the connection")
        data += chunk
    return bytes(data)


def _header(api_key: ApiKey, correlation_id: int) -> RequestHeader:
    return RequestHeader(
        api_key=api_key, api_version=0, correlation_id=correlation_id, client_id="heavy"
    )


def heavy_client_main(
    port: int, expands_to: int, started: Event, stop: Event, results: multiprocessing.Queue[str]
) -> None:
    """Push fresh-instance heavy payloads as fast as the server answers, until ``stop``."""
    payload = heavy_payload(expands_to)
    codes: dict[int, int] = {}
    pushes = 0
    correlation = 0
    with socket.create_connection((HOST, port), timeout=30) as sock:
        started.set()
        begin = time.monotonic()
        while not stop.is_set():
            correlation += 1
            header = _header(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, correlation)
            answer = _call(sock, encode_request(header, GetTelemetrySubscriptionsRequest()))
            _, get = decode_response(answer, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0)
            assert isinstance(get, GetTelemetrySubscriptionsResponse)
            correlation += 1
            request = PushTelemetryRequest(
                client_instance_id=get.client_instance_id or uuid.UUID(int=0),
                subscription_id=get.subscription_id,
                terminating=False,
                compression_type=4,
                metrics=payload,
            )
            header = _header(ApiKey.PUSH_TELEMETRY, correlation)
            answer = _call(sock, encode_request(header, request))
            _, push = decode_response(answer, ApiKey.PUSH_TELEMETRY, 0)
            assert isinstance(push, PushTelemetryResponse)
            codes[push.error_code] = codes.get(push.error_code, 0) + 1
            pushes += 1
        elapsed = time.monotonic() - begin
    summary = ", ".join(f"{n} x {code}" for code, n in sorted(codes.items()))
    results.put(
        f"{pushes / elapsed:.1f} heavy pushes/s ({len(payload):,} B each, expanding to"
        f" {expands_to:,} B; answers: {summary})"
    )


def ordinary_load(args: argparse.Namespace, port: int) -> PhaseResult:
    spec = LoadSpec(
        host=HOST,
        port=port,
        mode="open",
        connections=args.connections,
        instances=args.clients,
        rate=args.rate,
        warmup_s=args.warmup,
        duration_s=args.duration,
    )
    result = run_load(spec, args.processes)
    if result.errors:
        raise RuntimeError("; ".join(result.errors))
    return result


def report(label: str, result: PhaseResult) -> float:
    ordered = result.latencies()
    p50, p99 = percentile(ordered, 0.50), percentile(ordered, 0.99)
    print(
        f"{label:<22}: {result.rate:,.0f} acknowledged pushes/s of {args_rate(result):,.0f}"
        f" offered, p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms,"
        f" max {(ordered[-1] if ordered else 0) * 1000:.1f} ms, refused {result.refused}",
        flush=True,
    )
    return p99


def args_rate(result: PhaseResult) -> float:
    return result.spec.rate


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=400, help="ordinary client instances")
    parser.add_argument("--rate", type=float, default=1_000.0, help="their pushes/s, in total")
    parser.add_argument("--connections", type=int, default=100, help="their connections")
    parser.add_argument("--processes", type=int, default=1, help="load-generator processes")
    parser.add_argument("--duration", type=float, default=15.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before")
    parser.add_argument(
        "--heavy-expands-to",
        type=int,
        default=BOUND + 1,
        help="decompressed size of each heavy push (default: the bound + 1, refused with 118)",
    )
    parser.add_argument("--quick", action="store_true", help="short phases, for a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration = min(args.duration, 3.0)
        args.warmup = min(args.warmup, 1.0)
    for name in ("clients", "rate", "connections", "processes", "duration"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive")
    if args.duration > 600 or args.processes > 16 or args.clients > 100_000:
        parser.error("bounded: --duration <= 600, --processes <= 16, --clients <= 100000")
    if not 0 < args.heavy_expands_to <= 4 * BOUND:
        parser.error("--heavy-expands-to must be within 1..64 MiB")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(
        f"machine: {os.cpu_count()} cores, shared by the server, {args.processes} load"
        f" process(es) and the heavy client; {args.clients} ordinary clients on"
        f" {args.connections} connections at {args.rate:,.0f} pushes/s;"
        f" {args.warmup:g} s warm-up + {args.duration:g} s per phase",
        flush=True,
    )
    ctx = multiprocessing.get_context("spawn")
    with workdir() as path:
        server = Kip714Server(path, 16_384, "none")
        heavy: multiprocessing.process.BaseProcess | None = None
        stop = ctx.Event()
        try:
            server.start()
            baseline = report("baseline", ordinary_load(args, server.kafka_port))
            started = ctx.Event()
            results: multiprocessing.Queue[str] = ctx.Queue()
            heavy = ctx.Process(
                target=heavy_client_main,
                args=(server.kafka_port, args.heavy_expands_to, started, stop, results),
                name="heavy-client",
                daemon=True,
            )
            heavy.start()
            if not started.wait(60):
                raise RuntimeError("the heavy client did not connect")
            loaded = report("with a heavy client", ordinary_load(args, server.kafka_port))
            stop.set()
            heavy.join(timeout=60)
            if heavy.exitcode != 0:
                raise RuntimeError(f"the heavy client failed (exit code {heavy.exitcode})")
            print(f"{'heavy client':<22}: {results.get(timeout=5)}", flush=True)
        finally:
            stop.set()
            if heavy is not None:
                heavy.join(timeout=30)
                if heavy.is_alive():
                    heavy.terminate()
                    heavy.join(timeout=5)
            code = server.stop()
        if code != 0:
            print(f"kip714 serve exited with {code}", file=sys.stderr)
    verdict = "ok" if loaded < TARGET_P99_S else "MISS"
    print(
        f"target: ordinary p99 < {TARGET_P99_S * 1000:.0f} ms with the heavy client [{verdict}]"
        f" (baseline p99 {baseline * 1000:.1f} ms)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
