"""``[lake]`` and ``[server] node_id``: handed to every iceberg landing, checked at load."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from exporters.iceberg import IcebergExporter
from telemetry.errors import ConfigError
from telemetry.server.config import load_settings, settings_from_mapping

if TYPE_CHECKING:
    from pathlib import Path


def test_lake_keys_become_options_of_every_iceberg_exporter(tmp_path: Path) -> None:
    config = tmp_path / "kip714.toml"
    config.write_text(
        """
[server]
node_id = "kip714-a"
[lake]
catalog = { type = "sql", uri = "sqlite:////srv/lake/catalog.db" }
warehouse = "s3://bucket/lake"
namespace = "telemetry"
s3_endpoint = "http://127.0.0.1:9000"
retention_hours = 720
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
retention_hours = 48
[exporters.lines]
type = "jsonl"
"""
    )
    settings = load_settings(config, data_dir=tmp_path / "data")
    exporters = {e.name: e for e in settings.exporters}
    landing = exporters["landing"].options
    assert landing["node_id"] == "kip714-a"
    assert landing["catalog"] == {"type": "sql", "uri": "sqlite:////srv/lake/catalog.db"}
    assert landing["warehouse"] == "s3://bucket/lake"
    assert landing["retention_hours"] == 48  # the exporter's own table wins
    assert landing["path"] == str(tmp_path / "data")
    assert "warehouse" not in exporters["lines"].options
    exporter = IcebergExporter(landing)
    assert exporter.location.namespace == "telemetry"
    assert exporter.location.storage == {"s3.endpoint": "http://127.0.0.1:9000"}
    assert exporter.node_id == "kip714-a"


def test_without_a_lake_section_the_default_landing_lands_under_the_data_dir(
    tmp_path: Path,
) -> None:
    settings = load_settings(data_dir=tmp_path)
    (landing,) = settings.exporters
    exporter = IcebergExporter(landing.options)
    assert exporter.location.catalog == {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path.absolute() / 'lake' / 'catalog.db'}",
    }
    assert exporter.location.warehouse == f"file://{tmp_path.absolute() / 'lake' / 'warehouse'}"


@pytest.mark.parametrize(
    ("document", "key"),
    [
        ({"lake": {"colour": 1}}, "lake.colour"),
        ({"lake": {"catalog": {"type": "hive", "uri": "x"}}}, "lake.catalog"),
        ({"lake": {"namespace": "a.b"}}, "lake.namespace"),
        ({"lake": {"retention_hours": 0}}, "lake.retention_hours"),
        ({"server": {"node_id": ""}}, "server.node_id"),
        ({"server": {"port": 1}}, "server.port"),
    ],
)
def test_bad_lake_keys_are_refused_naming_the_key(document: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping(document)
    assert caught.value.key == key
