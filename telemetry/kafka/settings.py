"""``[kafka]`` settings: where the Kafka listener binds, what it advertises, its frame limit."""

from __future__ import annotations

from dataclasses import dataclass

#: Kafka's ``socket.request.max.bytes`` is 100 MiB; telemetry needs far less,
#: and the limit is also the most one connection may buffer.
DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024


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
