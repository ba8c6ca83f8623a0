"""``[meta]``: where the metadata store lives, on this node's disk or in a Kafka topic.

``store = "local"`` (the default) keeps ``<data_dir>/meta/``. ``store =
"kafka"`` shares one image among every node that names the same topic of the
same cluster; the connection keys are the Kafka client's own
(``security.protocol``, ``sasl.mechanism``, ...), spelled with underscores
(``telemetry.cluster.connection``, shared with ``[log] store = "kafka"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from telemetry import toml_checks as toml
from telemetry.cluster.connection import (
    CONNECTION_KEYS,
    DEFAULT_STARTUP_TIMEOUT_S,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    ClusterConnection,
    choice,
    parse_connection,
    topic_name,
)
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_STARTUP_TIMEOUT_S",
    "DEFAULT_TOPIC",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "STORES",
    "MetaSettings",
    "parse_meta",
]

STORES: Final = ("local", "kafka")
DEFAULT_TOPIC: Final = "_kip714_metadata"
_KEYS: Final = {"store", "topic", *CONNECTION_KEYS}


@dataclass(frozen=True, slots=True, kw_only=True)
class MetaSettings(ClusterConnection):
    store: str = "local"
    topic: str = DEFAULT_TOPIC


def parse_meta(section: Mapping[str, Any]) -> MetaSettings:
    """The ``[meta]`` table (empty when absent); unknown keys and bad values are refused."""
    toml.refuse_unknown("meta.", section, set(_KEYS))
    store = choice("meta.store", section.get("store", "local"), STORES)
    if store == "local":
        extra = sorted(set(section) - {"store"})
        if extra:
            raise ConfigError(
                f"meta.{extra[0]}", section[extra[0]], 'applies only to store = "kafka"'
            )
        return MetaSettings()
    connection = parse_connection("meta", section)
    topic = topic_name("meta.topic", section.get("topic", DEFAULT_TOPIC))
    return MetaSettings(store=store, topic=topic, **connection)
