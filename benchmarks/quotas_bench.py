"""Quota core costs, in nanoseconds per operation, beside the cost of a bare method call.

Prints, for each operation, the median and p99 over repeated batches, and the
ratio to a bare Python method call measured in the same run, so the figures
read the same on a faster or slower machine. The managers are measured at
steady state: every entity has recorded in more than ``quota.window.num``
windows, so every sample ring is full and recycling, as in a server that has
been up for a while.

Also prints the memory held per entity (tracemalloc) of a ``ClientQuotaManager``
and a ``RequestQuotaManager`` at steady state: each entity recorded and
throttled in enough windows that both its sensors hold full rings (the quota
rate: ``quota.window.num + 1`` windows; the throttle-time average, on the
registry's default config: 3); and, for comparison, after a single record.

Targets: manager record-and-check under 3 µs median on 2 cores;
at most 2 KiB per entity at steady state.

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
    RequestQuotaManager,
    SampledStat,
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


def _steady_clients(
    manager: ClientQuotaManager, client_ids: list[str], value: float, throttled: bool
) -> int:
    """Record every client until all its rings are full; returns the time of the last round.

    The throttle-time sensor has the registry's default config (Kafka's
    ``metrics.num.samples`` windows of ``metrics.sample.window.ms``), so the
    rounds first step through ``samples + 1`` of those long windows, then
    ``quota.window.num + 1`` quota windows.

    ``throttled``: the quota is set so every record violates it, and each
    violation is noted with ``throttle()`` as the server does, so the
    throttle-time sensor records too.
    """
    bound = 1e-6 if throttled else 1e12
    manager.update_quota(None, DEFAULT, Quota.upper_bound(bound))
    record = manager.record_and_get_throttle_time_ms
    throttle = manager.throttle
    default = manager.metrics.config
    rounds = [T0 + k * default.time_window_ms for k in range(default.samples + 1)]
    rounds += [rounds[-1] + k * manager.window_size_ms for k in range(1, manager.samples + 2)]
    for now in rounds:
        for client_id in client_ids:
            throttle_ms = record(None, client_id, value, now)
            if throttle_ms:
                throttle(None, client_id, throttle_ms, now)
    return rounds[-1]


def _ring_slots(manager: ClientQuotaManager, client_id: str) -> tuple[int, int]:
    """Windows held by the client's quota-rate and throttle-time rings (checks the claim)."""
    group = manager.quota_type.value
    quota_sensor = manager.metrics.get_sensor(f"{group}-:{client_id}")
    throttle_sensor = manager.metrics.get_sensor(f"{group}ThrottleTime-:{client_id}")
    assert quota_sensor is not None
    assert throttle_sensor is not None
    rate = quota_sensor.metrics[0].stat
    avg = throttle_sensor.metrics[0].stat
    assert isinstance(rate, Rate)
    assert isinstance(avg, SampledStat)
    return len(rate.stat.samples), len(avg.samples)


def bench_manager(
    manager_type: type[ClientQuotaManager],
    value: float,
    entities: int,
    repeats: int,
    baseline: float,
) -> None:
    ops = entities
    manager = manager_type()
    client_ids = [f"client-{i}" for i in range(entities)]
    steady_ms = _steady_clients(manager, client_ids, value, throttled=False)
    slots = _ring_slots(manager, client_ids[0])[0]

    def manager_batch(index: int) -> None:
        record = manager.record_and_get_throttle_time_ms
        now = steady_ms + index * 97  # windows keep completing: slots are recycled
        for client_id in client_ids:
            record(None, client_id, value, now)

    median = _report(
        f"{manager_type.__name__}.record_and_get_throttle_time_ms",
        _measure(manager_batch, ops, repeats),
        baseline,
    )
    verdict = "meets" if median < 3000 else "MISSES"
    print(
        f"  ({entities} entities, rings full: {slots} windows each)"
        f" -> {verdict} the 3 µs target ({median / 1000:.2f} µs)"
    )


def _held_per_entity(
    manager_type: type[ClientQuotaManager], value: float, entities: int, steady: bool
) -> tuple[float, tuple[int, int]]:
    """Bytes tracemalloc sees the manager hold per entity, client-id strings excluded."""
    client_ids = [f"idle-client-{i:06d}" for i in range(entities)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        manager = manager_type()
        if steady:
            _steady_clients(manager, client_ids, value, throttled=True)
        else:
            manager.update_quota(None, DEFAULT, Quota.upper_bound(1e12))
            for client_id in client_ids:
                manager.record_and_get_throttle_time_ms(None, client_id, value, T0)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    if not steady:
        return held / entities, (0, 0)
    return held / entities, _ring_slots(manager, client_ids[0])


def bench_memory(entities: int) -> None:
    for manager_type, value in ((ClientQuotaManager, 1000.0), (RequestQuotaManager, 2e6)):
        name = manager_type.__name__
        once, _ = _held_per_entity(manager_type, value, entities, steady=False)
        print(f"memory per entity, {name}, after one record {once:18.0f} B")
        steady, (rate_slots, avg_slots) = _held_per_entity(manager_type, value, entities, True)
        verdict = "meets" if steady <= 2048 else "MISSES"
        print(
            f"memory per entity, {name}, steady state {steady:19.0f} B"
            f"   -> {verdict} the 2 KiB target\n"
            f"  ({entities} entities; rings full: rate {rate_slots}, throttle-time {avg_slots}"
            " windows)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    baseline = bench_sensors(args.entities, args.repeats)
    bench_manager(ClientQuotaManager, 1000.0, args.entities, args.repeats, baseline)
    bench_manager(RequestQuotaManager, 2e6, args.entities, args.repeats, baseline)
    bench_memory(args.entities)


if __name__ == "__main__":
    main()
