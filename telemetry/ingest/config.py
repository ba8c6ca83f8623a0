"""Where the ingest log lives (this node's disk or a topic in the user's Kafka), its limits."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from telemetry import toml_checks as toml
from telemetry.cluster.connection import (
    CONNECTION_KEYS,
    ClusterConnection,
    choice,
    parse_connection,
    startup_timeout,
    topic_name,
)
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

_MIB = 1024 * 1024
STORES: Final = ("local", "kafka")
DEFAULT_TOPIC: Final = "_kip714_pushes"
DEFAULT_PARTITIONS: Final = 12
#: The keys of the local log's disk, which a log in Kafka does not have.
LOCAL_KEYS: Final = ("segment_bytes", "max_bytes", "max_pending_decoded_bytes")
#: The keys of a log in Kafka besides the connection's.
KAFKA_KEYS: Final = ("topic", "partitions", *sorted(CONNECTION_KEYS))
#: Every ``[log]`` key.
KEYS: Final = frozenset({"store", "max_record_bytes", "full_throttle_ms", *LOCAL_KEYS, *KAFKA_KEYS})


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """Sizes and limits of one ingest log.

    Attributes:
        segment_bytes: Roll to a new segment once the active one would exceed
            this. Retention deletes whole segments, so this is also the
            granularity at which consumed data leaves the disk.
        max_bytes: The disk budget: bytes the log's segments may occupy,
            counting records still being written. At least two segments, so
            that consumers that have caught up always leave room to append.
        max_record_bytes: The largest single frame accepted.
        full_throttle_ms: Throttle time suggested to clients refused because
            the budget is exhausted; exporters need time to catch up and the
            log cannot predict how long, so this is a fixed, tunable value.
        max_pending_decoded_bytes: The budget of work not yet done: the
            decoded (decompressed) size of records not yet consumed by every
            exporter. A push beyond it is refused as when the disk budget is
            exhausted (THROTTLING_QUOTA_EXCEEDED / 503): a small compressed
            push can decode to millions of data points, which the disk
            budget, counting bytes as sent, does not see.
    """

    segment_bytes: int = 64 * _MIB
    max_bytes: int = 1024 * _MIB
    max_record_bytes: int = 16 * _MIB
    full_throttle_ms: int = 1000
    max_pending_decoded_bytes: int = 4096 * _MIB
    #: ``local`` (``<data_dir>/log/``) or ``kafka`` (``topic`` of ``cluster``).
    store: str = "local"
    topic: str = DEFAULT_TOPIC
    #: Partitions of ``topic`` when kip714 creates it (an existing topic keeps its own).
    partitions: int = DEFAULT_PARTITIONS
    #: How to reach the cluster (``store = "kafka"`` only): [log]'s keys, else [meta]'s.
    cluster: ClusterConnection | None = None

    def __post_init__(self) -> None:
        if self.segment_bytes <= 0:
            raise ValueError(f"segment_bytes must be positive, got {self.segment_bytes}")
        if self.max_bytes < 2 * self.segment_bytes:
            raise ValueError(
                f"max_bytes ({self.max_bytes}) must be at least twice segment_bytes "
                f"({self.segment_bytes})"
            )
        if self.max_record_bytes <= 0 or self.full_throttle_ms < 0:
            raise ValueError("max_record_bytes must be positive and full_throttle_ms >= 0")
        if self.max_pending_decoded_bytes < self.max_record_bytes:
            raise ValueError(
                f"max_pending_decoded_bytes ({self.max_pending_decoded_bytes}) must be at least "
                f"max_record_bytes ({self.max_record_bytes}), so any record fits once consumed"
            )


def parse_log(section: Mapping[str, Any], meta: ClusterConnection | None = None) -> LogConfig:
    """The ``[log]`` table; ``meta``: [meta]'s connection, when it is in Kafka.

    ``store = "kafka"`` without ``bootstrap_servers`` shares [meta]'s
    connection keys (its ``startup_timeout_s`` unless [log] sets one).
    """
    toml.refuse_unknown("log.", section, set(KEYS))
    store = choice("log.store", section.get("store", "local"), STORES)
    wrong = KAFKA_KEYS if store == "local" else LOCAL_KEYS
    other = "kafka" if store == "local" else "local"
    for key in wrong:
        if key in section:
            raise ConfigError(f"log.{key}", section[key], f'applies only to store = "{other}"')
    sizes: dict[str, Any] = {
        key: toml.integer(f"log.{key}", section[key], 0)
        for key in ("max_record_bytes", "full_throttle_ms", *LOCAL_KEYS)
        if key in section
    }
    extra: dict[str, Any] = {}
    if store == "kafka":
        extra = {
            "store": store,
            "topic": topic_name("log.topic", section.get("topic", DEFAULT_TOPIC)),
            "partitions": toml.integer(
                "log.partitions", section.get("partitions", DEFAULT_PARTITIONS), 1
            ),
            "cluster": _cluster(section, meta),
        }
    try:
        return LogConfig(**sizes, **extra)
    except ValueError as error:
        pending = "max_pending_decoded_bytes"
        key = pending if str(error).startswith(pending) else next(iter(sizes), "log")
        raise ConfigError(f"log.{key}", sizes.get(key), str(error)) from None


def _cluster(section: Mapping[str, Any], meta: ClusterConnection | None) -> ClusterConnection:
    if "bootstrap_servers" in section:
        return ClusterConnection(**parse_connection("log", section))
    given = sorted(CONNECTION_KEYS & set(section) - {"startup_timeout_s"})
    if given:
        raise ConfigError(
            f"log.{given[0]}",
            "<hidden>" if given[0] == "sasl_password" else section[given[0]],
            "needs log.bootstrap_servers (without it, [meta]'s connection is used whole)",
        )
    if meta is None or meta.bootstrap_servers is None:
        raise ConfigError(
            "log.bootstrap_servers",
            None,
            'store = "kafka" needs HOST:PORT[,...] (or [meta] store = "kafka", whose '
            "connection it then shares)",
        )
    connection = meta.connection()
    if "startup_timeout_s" in section:
        connection = replace(connection, startup_timeout_s=startup_timeout("log", section))
    return connection
