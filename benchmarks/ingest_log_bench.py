"""Throughput and latency of ``IngestLog.append`` under concurrent appenders.

Closed loop (default): each appender stands for one in-flight push: it
appends, waits for the acknowledgement and appends again, as a connection
with one outstanding request does. Open loop (``--rate``): pushes arrive at a
fixed rate whatever the latency, as many independent clients do; this is the
figure to compare with the server's target (8,000 pushes/s, p99 < 20 ms).
Bounded by ``--seconds`` and ``--max-appends``.

    python3 benchmarks/ingest_log_bench.py --appenders 64 --seconds 5
    python3 benchmarks/ingest_log_bench.py --rate 8000 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

from telemetry.ingest import IngestLog, LogConfig, PushContext


async def _run(args: argparse.Namespace, directory: str) -> None:
    config = LogConfig(segment_bytes=64 * 1024 * 1024, max_bytes=4 * 1024 * 1024 * 1024)
    log = await IngestLog.open(directory, config)
    await log.register("bench")
    payloads = [os.urandom(size) for size in range(2048, 6145, 512)]
    latencies: list[float] = []
    deadline = time.perf_counter() + args.seconds
    budget = [args.max_appends]

    def make_context(n: int) -> PushContext:
        return PushContext(
            client_instance_id="AAAAAAAAAAAAAAAAAAAAAA",
            subscription_id=12345,
            received_time_ms=1_700_000_000_000,
            push_interval_ms=5000,
            client_id=f"producer-{n}",
            client_software_name="confluent-kafka-python",
            client_software_version="2.6.0",
            client_source_address="127.0.0.1",
            client_source_port=50000 + n % 10000,
        )

    async def appender(n: int) -> None:
        context = make_context(n)
        i = n
        while budget[0] > 0 and time.perf_counter() < deadline:
            budget[0] -= 1
            started = time.perf_counter()
            await log.append(context, payloads[i % len(payloads)])
            latencies.append(time.perf_counter() - started)
            i += 1

    async def one(n: int) -> None:
        started = time.perf_counter()
        await log.append(make_context(n), payloads[n % len(payloads)])
        latencies.append(time.perf_counter() - started)

    async def open_loop() -> None:
        tasks: list[asyncio.Task[None]] = []
        begun = time.perf_counter()
        while len(tasks) < args.max_appends and time.perf_counter() < deadline:
            due = int((time.perf_counter() - begun) * args.rate)
            while len(tasks) < min(due, args.max_appends):
                tasks.append(asyncio.create_task(one(len(tasks))))
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)

    fsyncs_before = log.stats.fsyncs
    started = time.perf_counter()
    if args.rate:
        await open_loop()
    else:
        await asyncio.gather(*(appender(n) for n in range(args.appenders)))
    elapsed = time.perf_counter() - started
    fsyncs = log.stats.fsyncs - fsyncs_before
    await log.close()
    latencies.sort()
    quantiles = statistics.quantiles(latencies, n=100)
    label = f"rate={args.rate}" if args.rate else f"appenders={args.appenders}"
    print(
        f"{label} appends={len(latencies)} seconds={elapsed:.2f} "
        f"appends/s={len(latencies) / elapsed:,.0f} fsyncs/s={fsyncs / elapsed:,.0f} "
        f"records/fsync={len(latencies) / max(fsyncs, 1):.1f} "
        f"p50={quantiles[49] * 1e3:.2f}ms p99={quantiles[98] * 1e3:.2f}ms "
        f"max={latencies[-1] * 1e3:.2f}ms "
        f"fsync_mean={log.stats.fsync_seconds_total / max(log.stats.fsyncs, 1) * 1e3:.2f}ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appenders", type=int, default=64)
    parser.add_argument("--rate", type=int, default=0, help="open loop: appends per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--max-appends", type=int, default=200_000)
    parser.add_argument("--dir", help="log directory (default: a temporary directory)")
    args = parser.parse_args()
    if args.dir:
        asyncio.run(_run(args, args.dir))
    else:
        with tempfile.TemporaryDirectory(prefix="ingest-log-bench-") as directory:
            asyncio.run(_run(args, directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
