"""Quota core costs, in nanoseconds per operation, beside the cost of a bare method call.

Prints, for each operation, the median and p99 over repeated batches, and the
ratio to a bare Python method call measured in the same run, so the figures
read the same on a faster or slower machine. Also prints the memory held per
idle entity of a ``ClientQuotaManager`` (one record each, then idle).

Targets: manager record-and-check under 3 µs median on 2 cores;
under 2 KiB per idle entity.

    python3 benchmarks/quotas_bench.py [--entities 10000] [--repeats 30]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable

from quotas import (
    DEFAULT,
    ClientQuotaManager,
    MetricConfig,
    Quota,
    Rate,
    Sensor,
    TokenBucket,
)

T0 = 1_700_000_000_000


class _Bare:
    def call(self, value: float, now_ms: int) -> None:
        return None


def _measure(batch: Callable[[int], None], ops_per_batch: int, repeats: int) -> list[float]:
    """ns per operation of each batch; the batch gets a batch index to vary time."""
    batch(0)  # warm up
    samples = []
    for index in range(1, repeats + 1):
        start = time.perf_counter_ns()
        batch(index)
        samples.append((time.perf_counter_ns() - start) / ops_per_batch)
    return samples


def _report(name: str, samples: list[float], baseline: float | None) -> float:
    median = statistics.median(samples)
    p99 = sorted(samples)[min(len(samples) - 1, int(len(samples) * 0.99))]
    ratio = f"{median / baseline:6.1f}x bare call" if baseline else ""
    print(f"{name:<58} median {median:8.0f} ns   p99 {p99:8.0f} ns   {ratio}")
    return median


def bench_sensors(entities: int, repeats: int) -> float:
    ops = entities

    bare = _Bare()

    def bare_batch(index: int) -> None:
        call = bare.call
        for i in range(ops):
            call(1.0, T0 + i)

    baseline = _report("bare Python method call", _measure(bare_batch, ops, repeats), None)

    config = MetricConfig(samples=11, time_window_ms=1000, quota=Quota.upper_bound(1e12))
    sensor = Sensor("rate")
    sensor.add("byte-rate", Rate(), config)

    def sensor_batch(index: int) -> None:
        record = sensor.record
        base = T0 + index * ops
        for i in range(ops):
            record(100.0, base + i)

    _report("Sensor.record, Rate + quota check", _measure(sensor_batch, ops, repeats), baseline)

    bucket_config = MetricConfig(samples=11, time_window_ms=1000, quota=Quota.upper_bound(1e6))
    bucket_sensor = Sensor("tokens")
    bucket_sensor.add("tokens", TokenBucket(), bucket_config)

    def bucket_batch(index: int) -> None:
        strict = bucket_sensor.strict_record
        base = T0 + index * ops
        for i in range(ops):
            strict(1.0, base + i)  # 1/ms against 1e6/s: always within quota

    _report("Sensor.strict_record, TokenBucket", _measure(bucket_batch, ops, repeats), baseline)
    return baseline


def bench_manager(entities: int, repeats: int, baseline: float) -> None:
    ops = entities
    manager = ClientQuotaManager()
    manager.update_quota(None, DEFAULT, Quota.upper_bound(1e9))
    client_ids = [f"client-{i}" for i in range(entities)]
    for client_id in client_ids:
        manager.record_and_get_throttle_time_ms(None, client_id, 1.0, T0)

    def manager_batch(index: int) -> None:
        record = manager.record_and_get_throttle_time_ms
        now = T0 + index * 97
        for client_id in client_ids:
            record(None, client_id, 1000.0, now)

    median = _report(
        f"ClientQuotaManager.record_and_get_throttle_time_ms ({entities} entities)",
        _measure(manager_batch, ops, repeats),
        baseline,
    )
    verdict = "meets" if median < 3000 else "MISSES"
    print(f"  -> {verdict} the 3 µs target ({median / 1000:.2f} µs)")


def bench_memory(entities: int) -> None:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    idle = ClientQuotaManager()
    idle.update_quota(None, DEFAULT, Quota.upper_bound(1e9))
    idle_ids = [f"idle-client-{i:06d}" for i in range(entities)]
    for client_id in idle_ids:
        idle.record_and_get_throttle_time_ms(None, client_id, 1.0, T0)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    ids_bytes = sum(len(c) + 49 for c in idle_ids) + 8 * len(idle_ids) + 56
    per_entity = (held - ids_bytes) / entities
    verdict = "meets" if per_entity < 2048 else "MISSES"
    print(
        f"memory per idle entity (2 sensors, rate + avg, caches)      {per_entity:8.0f} B"
        f"   -> {verdict} the 2 KiB target"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    baseline = bench_sensors(args.entities, args.repeats)
    bench_manager(args.entities, args.repeats, baseline)
    bench_memory(args.entities)


if __name__ == "__main__":
    main()
