"""The OTLP route's decoding threads (telemetry.http.decoding): turns, the heavy lane, CPU time."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

from telemetry.http.decoding import FairDecoder


async def _started(gate_open: threading.Event, started: threading.Event) -> None:
    for _ in range(3000):  # at most 30 s
        if started.is_set():
            return
        await asyncio.sleep(0.01)
    gate_open.set()
    raise AssertionError("the first job never started")


async def test_senders_take_turns_whatever_each_has_queued() -> None:
    decoder = FairDecoder(1)
    gate, started = threading.Event(), threading.Event()
    order: list[str] = []

    def blocking() -> str:
        started.set()
        gate.wait(60)
        return "gate"

    def job(name: str) -> str:
        order.append(name)
        return name

    try:
        first = asyncio.ensure_future(decoder.run("g", blocking))
        await _started(gate, started)
        jobs = [
            asyncio.ensure_future(decoder.run(sender, functools.partial(job, name)))
            for sender, name in (("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1"))
        ]
        await asyncio.sleep(0)  # every job queued behind the gate
        assert decoder.queued() == 5
        gate.set()
        outcomes = await asyncio.wait_for(asyncio.gather(first, *jobs), 60)
    finally:
        gate.set()
        decoder.close()
    assert [outcome.result() for outcome in outcomes] == ["gate", "a1", "a2", "a3", "b1", "c1"]
    assert order == ["a1", "b1", "c1", "a2", "a3"]


async def test_a_light_job_finds_a_thread_while_heavy_ones_wait() -> None:
    decoder = FairDecoder(2)
    gate, started = threading.Event(), threading.Event()

    def heavy() -> str:
        started.set()
        gate.wait(60)
        return "heavy"

    try:
        running = asyncio.ensure_future(decoder.run("a", heavy, heavy=True))
        await _started(gate, started)
        waiting = asyncio.ensure_future(decoder.run("b", lambda: "second heavy", heavy=True))
        light = await asyncio.wait_for(decoder.run("c", lambda: "light"), 60)
        assert light.result() == "light"
        assert not waiting.done()  # the one heavy slot of two threads is taken
        gate.set()
        assert (await asyncio.wait_for(waiting, 60)).result() == "second heavy"
        await running
    finally:
        gate.set()
        decoder.close()
    assert decoder.threads == 2


async def test_a_jobs_cpu_time_and_error_come_back() -> None:
    decoder = FairDecoder(1)

    def spin() -> int:
        deadline = time.thread_time() + 0.05
        while time.thread_time() < deadline:
            pass
        raise ValueError("refused")

    try:
        outcome = await asyncio.wait_for(decoder.run("a", spin), 60)
    finally:
        decoder.close()
    assert isinstance(outcome.error, ValueError)
    assert outcome.thread_ns >= 50_000_000


async def test_closing_cancels_what_is_queued() -> None:
    decoder = FairDecoder(1)
    gate, started = threading.Event(), threading.Event()

    def blocking() -> None:
        started.set()
        gate.wait(60)

    first = asyncio.ensure_future(decoder.run("a", blocking))
    try:
        await _started(gate, started)
        queued = asyncio.ensure_future(decoder.run("b", lambda: None))
        await asyncio.sleep(0)
        decoder.close()
        try:
            await asyncio.wait_for(queued, 60)
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("a queued job ran after close")
    finally:
        gate.set()
    await asyncio.wait_for(first, 60)  # the running one finished on its own
