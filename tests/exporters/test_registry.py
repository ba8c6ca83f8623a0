"""Exporter discovery through real ``kip714.exporters`` entry points.

``test-recorder`` comes from the separately installed distribution in
tests/plugins/kip714-test-exporter (``pip install -e`` it before the tests).
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from exporters import registry
from exporters.api import Exporter
from exporters.jsonl import JsonlExporter
from exporters.registry import (
    ENTRY_POINT_GROUP,
    ExporterConfigError,
    ExporterConflictError,
    ExporterLoadError,
    ExporterNotFoundError,
)
from exporters.testing import InMemoryExporter
from tests.exporters.support import INSTANCE_ID, push


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    registry.refresh()
    yield
    registry.unregister("memory")
    registry.refresh()


def test_group_name_is_the_documented_one() -> None:
    assert ENTRY_POINT_GROUP == "kip714.exporters"


def test_builtin_and_third_party_exporters_are_discovered_via_entry_points() -> None:
    names = registry.available()
    assert {"jsonl", "test-recorder"} <= set(names)
    assert names == sorted(names)
    assert registry.load("jsonl") is JsonlExporter
    recorder = registry.load("test-recorder")
    assert recorder.__module__ == "kip714_test_exporter"
    dists = {
        ep.name: ep.dist.name if ep.dist else None
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    }
    assert dists["test-recorder"] == "kip714-test-exporter"
    assert dists["jsonl"] == "kip714"


async def test_the_installed_plugin_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "recorded.jsonl"
    exporter = registry.create("audit", "test-recorder", {"path": str(out)})
    assert isinstance(exporter, Exporter)
    await exporter.start()
    await exporter.export([push(b"", offset=3), push(b"", offset=4)])
    await exporter.close()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == [
        {"offset": 3, "client_instance_id": INSTANCE_ID},
        {"offset": 4, "client_instance_id": INSTANCE_ID},
    ]


def test_unknown_type_lists_available_names_and_what_to_install() -> None:
    with pytest.raises(ExporterNotFoundError) as info:
        registry.load("kafka-forwarder")
    message = str(info.value)
    assert "'kafka-forwarder'" in message
    assert "jsonl" in message
    assert "test-recorder" in message
    assert "kip714-exporter-kafka-forwarder" in message
    assert isinstance(info.value, LookupError)
    assert info.value.available == registry.available()


def test_create_with_unknown_type_raises_not_found() -> None:
    with pytest.raises(ExporterNotFoundError):
        registry.create("x", "nope", {})


def test_unknown_option_gives_config_error_naming_instance_and_key(tmp_path: Path) -> None:
    with pytest.raises(ExporterConfigError) as info:
        registry.create("landing", "jsonl", {"path": str(tmp_path), "colour": "blue"})
    error = info.value
    assert error.instance_name == "landing"
    assert error.type_name == "jsonl"
    assert error.key == "colour"
    assert error.value == "blue"
    assert "exporters.landing.options.colour = 'blue'" in str(error)
    assert isinstance(error, ValueError)


def test_bad_value_gives_config_error_naming_key_and_value(tmp_path: Path) -> None:
    with pytest.raises(ExporterConfigError) as info:
        registry.create("landing", "jsonl", {"path": str(tmp_path), "fsync": "yes"})
    assert info.value.key == "fsync"
    assert info.value.value == "yes"
    assert "fsync = 'yes'" in str(info.value)


def test_missing_required_option_is_a_config_error() -> None:
    with pytest.raises(ExporterConfigError, match=r"exporters\.landing\.options: missing"):
        registry.create("landing", "jsonl", {})


def test_factory_errors_with_a_key_attribute_are_reported_by_key() -> None:
    class KeyedError(ValueError):
        key = "depth"

    def factory(config: Mapping[str, Any]) -> Exporter:
        raise KeyedError("too deep")

    registry.register("memory", factory)
    with pytest.raises(ExporterConfigError) as info:
        registry.create("m", "memory", {"depth": 99, "other": 1})
    assert (info.value.key, info.value.value) == ("depth", 99)


def test_factory_gets_a_read_only_copy_of_its_options() -> None:
    seen: list[Mapping[str, Any]] = []

    def factory(config: Mapping[str, Any]) -> Exporter:
        seen.append(config)
        return InMemoryExporter()

    registry.register("memory", factory)
    options = {"a": 1}
    registry.create("m", "memory", options)
    with pytest.raises(TypeError):
        seen[0]["a"] = 2  # type: ignore[index]
    assert seen[0] == options


def test_register_adds_a_type_and_refuses_to_shadow_one() -> None:
    registry.register("memory", InMemoryExporter)
    assert "memory" in registry.available()
    assert isinstance(registry.create("m", "memory", {}), InMemoryExporter)
    with pytest.raises(ExporterConflictError):
        registry.register("memory", InMemoryExporter)
    with pytest.raises(ExporterConflictError):
        registry.register("jsonl", InMemoryExporter)
    registry.unregister("memory")
    assert "memory" not in registry.available()


def test_a_factory_that_returns_no_exporter_is_refused() -> None:
    def factory(config: Mapping[str, Any]) -> Any:
        return object()

    registry.register("memory", factory)
    with pytest.raises(ExporterLoadError, match="lacks the Exporter methods"):
        registry.create("m", "memory", {})


def _install_fake_distribution(
    monkeypatch: pytest.MonkeyPatch, site: Path, dist: str, entry_points: str
) -> None:
    """Make a metadata-only distribution visible on sys.path (no pip needed)."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry_points}\n")
    monkeypatch.syspath_prepend(str(site))
    registry.refresh()


def test_one_name_from_two_distributions_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _install_fake_distribution(monkeypatch, tmp_path, "kip714-evil", "jsonl = evil:Exporter")
    with pytest.raises(ExporterConflictError) as info:
        registry.load("jsonl")
    assert "kip714-evil (evil:Exporter)" in str(info.value)
    assert "kip714 (exporters.jsonl:JsonlExporter)" in str(info.value)
    # Other names stay usable.
    assert registry.load("test-recorder") is not None


def test_the_selection_is_cached_until_refresh(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    registry.available()
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    (site / "kip714_late-1.0.dist-info").mkdir()
    (site / "kip714_late-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kip714-late\nVersion: 1.0\n"
    )
    (site / "kip714_late-1.0.dist-info" / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nlate = late:Exporter\n"
    )
    assert "late" not in registry.available()
    registry.refresh()
    assert "late" in registry.available()


def test_an_entry_point_that_cannot_import_is_a_load_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _install_fake_distribution(
        monkeypatch, tmp_path, "kip714-broken", "broken = no_such_module_kip714:Exporter"
    )
    with pytest.raises(ExporterLoadError, match="failed to import"):
        registry.load("broken")
