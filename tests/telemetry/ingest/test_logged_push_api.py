"""The plugin-facing record type and error classes the log hands to exporters."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import exporters
from exporters import api
from exporters.api import (
    Exporter,
    ExporterFactory,
    ExportError,
    LoggedPush,
    PermanentExportError,
    TransientExportError,
)
from tests.telemetry.ingest.support import INSTANCE_ID


def _push() -> LoggedPush:
    return LoggedPush(
        offset=1,
        client_instance_id=INSTANCE_ID,
        subscription_id=2,
        client_id=None,
        client_software_name=None,
        client_software_version=None,
        client_source_address=None,
        client_source_port=None,
        principal=None,
        received_time_ms=3,
        push_interval_ms=4,
        terminating=False,
        content_type="OTLP",
        payload=b"x",
    )


def test_logged_push_is_frozen_and_slotted() -> None:
    push = _push()
    with pytest.raises(dataclasses.FrozenInstanceError):
        push.offset = 2  # type: ignore[misc]
    assert not hasattr(push, "__dict__")
    assert [f.name for f in dataclasses.fields(LoggedPush)][:2] == ["offset", "client_instance_id"]


def test_export_errors_say_whether_to_retry() -> None:
    assert TransientExportError("sink down").retryable
    assert not PermanentExportError("bad data").retryable
    assert not ExportError("x", retryable=False).retryable
    assert isinstance(PermanentExportError(), ExportError)


class _MemoryExporter:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.seen: list[int] = []

    async def start(self) -> None:
        pass

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        self.seen += [p.offset for p in batch]

    async def flush(self) -> None:
        pass

    async def close(self) -> None:
        pass


async def test_a_plain_class_satisfies_the_protocols() -> None:
    factory: ExporterFactory = _MemoryExporter
    exporter = factory({"path": "/tmp/x"})
    assert isinstance(exporter, Exporter)
    await exporter.export([_push()])
    assert isinstance(exporter, _MemoryExporter)
    assert exporter.seen == [1]
    assert not isinstance(object(), Exporter)


def test_package_reexports_the_api() -> None:
    assert exporters.__all__ == api.__all__
    for name in api.__all__:
        assert getattr(exporters, name) is getattr(api, name)
