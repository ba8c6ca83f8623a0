"""The exporter contract (exporters/api.py), checked against every registered exporter.

Parametrised over ``registry.available()``, so a new entry point in
``kip714.exporters`` fails ``test_every_registered_exporter_is_covered``
until it gets sample options in ``OPTIONS`` and with them these checks
(after the OpenTelemetry Collector's ``exportertest`` contract checker).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from exporters import registry
from exporters.api import Exporter, LoggedPush
from exporters.testing import FailingExporter, InMemoryExporter, SlowExporter
from tests.exporters.otlp_sink import OtlpSink
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, push

_OTLP_SINK = OtlpSink()

OPTIONS: dict[str, Callable[[Path], Mapping[str, Any]]] = {
    "jsonl": lambda tmp: {"path": str(tmp / "contract.jsonl")},
    "otlp": lambda tmp: {"endpoint": _OTLP_SINK.url},
    "prometheus": lambda tmp: {"listen": "127.0.0.1:0"},
    "iceberg": lambda tmp: {"path": str(tmp / "lake")},
    "test-recorder": lambda tmp: {"path": str(tmp / "recorded.jsonl")},
}

DOUBLES: dict[str, Callable[[], Exporter]] = {
    "testing.InMemoryExporter": InMemoryExporter,
    "testing.FailingExporter(failures=0)": lambda: FailingExporter(failures=0),
    "testing.SlowExporter(delay_s=0)": lambda: SlowExporter(delay_s=0),
}

registry.refresh()
REGISTERED = registry.available()


@pytest.fixture(scope="module", autouse=True)
def _otlp_sink() -> Iterator[None]:
    """A real OTLP/HTTP server for the ``otlp`` exporter's options."""
    with _OTLP_SINK:
        yield


@pytest.fixture(params=[*REGISTERED, *DOUBLES])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Exporter]]:
    name: str = request.param
    if name in DOUBLES:
        yield DOUBLES[name]
    else:
        yield lambda: registry.create("contract", name, OPTIONS[name](tmp_path))


def _batch() -> list[LoggedPush]:
    return [
        push(PRODUCER_PUSH.read_bytes(), offset=1),
        push(CONSUMER_PUSH.read_bytes(), offset=2, terminating=True),
    ]


def test_every_registered_exporter_is_covered() -> None:
    assert {"jsonl", "test-recorder"} <= set(REGISTERED)
    assert set(REGISTERED) <= set(OPTIONS), "give new exporters sample OPTIONS"


def test_the_factory_is_an_exporter(make: Callable[[], Exporter]) -> None:
    assert isinstance(make(), Exporter)


async def test_close_without_start_is_valid_and_idempotent(make: Callable[[], Exporter]) -> None:
    exporter = make()
    await exporter.close()
    await exporter.close()


async def test_full_lifecycle_with_idempotent_close(make: Callable[[], Exporter]) -> None:
    exporter = make()
    await exporter.start()
    await exporter.export(_batch())
    await exporter.flush()
    await exporter.close()
    await exporter.close()


async def test_export_leaves_the_batch_unmutated(make: Callable[[], Exporter]) -> None:
    exporter = make()
    batch = _batch()
    before = list(batch)
    await exporter.start()
    await exporter.export(batch)
    await exporter.close()
    assert batch == before
    assert all(a is b for a, b in zip(batch, before, strict=True))


async def test_export_accepts_any_sequence(make: Callable[[], Exporter]) -> None:
    exporter = make()
    await exporter.start()
    await exporter.export(tuple(_batch()))
    await exporter.close()


async def test_export_does_not_block_the_loop(make: Callable[[], Exporter]) -> None:
    # Big enough that flattening and writing it on the loop thread would cost
    # well over a second of CPU. Measured as the loop thread's own CPU time
    # during ``export`` (what it spent instead of serving others), not as
    # gaps between loop ticks: a second test worker competing for the core
    # stretches wall-clock gaps, never the loop thread's CPU time.
    exporter = make()
    await exporter.start()
    batch = _batch() * 1500
    loop_before, process_before = time.thread_time(), time.process_time()
    await exporter.export(batch)
    await exporter.flush()
    loop_cpu = time.thread_time() - loop_before
    process_cpu = time.process_time() - process_before
    await exporter.close()
    assert loop_cpu < 0.1, (
        f"the loop thread spent {loop_cpu:.3f} s of the export's {process_cpu:.3f} s of CPU"
    )
