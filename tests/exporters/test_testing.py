"""The shipped test doubles behave as documented."""

from __future__ import annotations

import asyncio
import time

import pytest

from exporters import registry
from exporters.api import PermanentExportError, TransientExportError
from exporters.testing import FailingExporter, InMemoryExporter, SlowExporter
from tests.exporters.support import push


async def test_in_memory_records_batches_and_lifecycle() -> None:
    exporter = InMemoryExporter()
    assert (exporter.started, exporter.flushed, exporter.closed) == (False, False, False)
    await exporter.start()
    batch = [push(b"", offset=1), push(b"", offset=2)]
    await exporter.export(batch)
    batch.append(push(b"", offset=3))  # the host may reuse its list afterwards
    await exporter.export([push(b"", offset=1)])
    await exporter.flush()
    await exporter.close()
    await exporter.close()
    assert exporter.offsets == [1, 2, 1]
    assert [len(b) for b in exporter.batches] == [2, 1]
    assert exporter.pushes[0].offset == 1
    assert (exporter.started, exporter.flushed, exporter.closed) == (True, True, True)
    assert (exporter.flush_count, exporter.close_count) == (1, 2)


async def test_in_memory_is_strict_about_the_lifecycle() -> None:
    exporter = InMemoryExporter()
    with pytest.raises(RuntimeError, match="before start"):
        await exporter.export([push(b"")])
    await exporter.start()
    await exporter.close()
    with pytest.raises(RuntimeError, match="after close"):
        await exporter.export([push(b"")])


@pytest.mark.parametrize(
    ("permanent", "error"), [(False, TransientExportError), (True, PermanentExportError)]
)
async def test_failing_fails_n_times_then_succeeds(permanent: bool, error: type[Exception]) -> None:
    exporter = FailingExporter(failures=2, permanent=permanent)
    await exporter.start()
    for _ in range(2):
        with pytest.raises(error):
            await exporter.export([push(b"", offset=9)])
    await exporter.export([push(b"", offset=9)])
    assert exporter.attempts == 3
    assert exporter.offsets == [9]


async def test_failing_forever_and_from_config() -> None:
    forever = FailingExporter(failures=None)
    await forever.start()
    for _ in range(5):
        with pytest.raises(TransientExportError):
            await forever.export([push(b"")])
    configured = FailingExporter({"failures": 1, "permanent": True})
    await configured.start()
    with pytest.raises(PermanentExportError):
        await configured.export([push(b"")])
    await configured.export([push(b"")])
    assert configured.attempts == 2


async def test_slow_delays_without_blocking_the_loop() -> None:
    exporter = SlowExporter(delay_s=0.05)
    await exporter.start()
    started = time.monotonic()
    other = asyncio.create_task(asyncio.sleep(0.01))
    await exporter.export([push(b"")])
    assert time.monotonic() - started >= 0.05
    assert other.done()
    assert exporter.offsets == [7]


@pytest.mark.parametrize(
    ("factory", "config", "key"),
    [
        (InMemoryExporter, {"x": 1}, "'x'"),
        (FailingExporter, {"failures": -1}, "'failures'"),
        (FailingExporter, {"permanent": "yes"}, "'permanent'"),
        (SlowExporter, {"delay_s": "1"}, "'delay_s'"),
        (SlowExporter, {"speed": 1}, "'speed'"),
    ],
)
def test_doubles_validate_their_options(factory: type, config: dict[str, object], key: str) -> None:
    with pytest.raises((TypeError, ValueError), match=key):
        factory(config)


def test_doubles_register_as_exporter_types() -> None:
    registry.register("memory", SlowExporter)
    try:
        exporter = registry.create("slow", "memory", {"delay_s": 0.5})
        assert isinstance(exporter, SlowExporter)
        assert exporter.delay_s == 0.5
        with pytest.raises(registry.ExporterConfigError) as info:
            registry.create("slow", "memory", {"delay_s": -1})
        assert info.value.key == "delay_s"
    finally:
        registry.unregister("memory")
