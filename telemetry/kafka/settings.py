"""``[kafka]`` settings: where the Kafka listener binds, what it advertises, its frame limit."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from telemetry import toml_checks as toml
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Kafka's ``socket.request.max.bytes`` is 100 MiB; telemetry needs far less,
#: and the limit is also the most one connection may buffer.
DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024
DEFAULT_KAFKA_LISTEN = "127.0.0.1:9092"


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaListenerConfig:
    """``[kafka]`` settings; ``advertised_*`` default to the bound address.

    The configuration refuses an unspecified advertised address (``0.0.0.0``,
    ``::``, given or defaulted from the bind address): clients connect to
    what Metadata advertises.
    """

    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    node_id: int = 1
    cluster_id: str = "kip714"


def parse_kafka(section: Mapping[str, Any]) -> KafkaListenerConfig:
    """``[kafka]``: where to listen, what to advertise, the largest frame."""
    host, port = toml.parse_host_port("kafka.listen", section.get("listen", DEFAULT_KAFKA_LISTEN))
    advertised_host: str | None = None
    advertised_port: int | None = None
    if "advertised" in section:
        advertised_host, advertised_port = toml.parse_host_port(
            "kafka.advertised", section["advertised"]
        )
        if advertised_port == 0:
            raise ConfigError("kafka.advertised", section["advertised"], "the port cannot be 0")
    max_frame = toml.integer(
        "kafka.max_frame_bytes", section.get("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES), 1024
    )
    return KafkaListenerConfig(
        host=host,
        port=port,
        advertised_host=advertised_host,
        advertised_port=advertised_port,
        max_frame_bytes=max_frame,
    )


def refuse_unspecified_advertised(kafka: KafkaListenerConfig) -> None:
    """Refuse an advertised ``0.0.0.0`` or ``::``, given or defaulted, as Kafka does.

    Metadata hands the advertised address to every client, which then
    connects to it; an unspecified address only means "every interface" to a
    listening socket. Kafka's broker refuses such an ``advertised.listeners``
    entry at start for the same reason.
    """
    host = kafka.advertised_host
    if host is not None:
        if _is_unspecified(host):
            shown = f"[{host}]" if ":" in host else host
            raise ConfigError(
                "kafka.advertised",
                f"{shown}:{kafka.advertised_port}",
                "clients cannot connect to an unspecified address",
            )
    elif _is_unspecified(kafka.host):
        raise ConfigError(
            "kafka.advertised",
            None,
            f"the Kafka listener binds {kafka.host}, which clients cannot connect to; "
            "set kafka.advertised to a HOST:PORT clients can reach",
        )


def _is_unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False  # a host name
