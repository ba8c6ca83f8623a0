"""``[limits]`` connection counts fitted to the process's descriptor limit.

Every connection, Kafka or HTTP, holds a file descriptor; so do the ingest
log's segments, the landing's files and the metadata store. The connection
limits therefore derive from the soft ``RLIMIT_NOFILE``, keeping 256
descriptors for the rest: ``max_connections`` = min(10,000, limit − 256) and
``max_connections_per_ip`` = min(1,000, max_connections // 2). A configured
value above that ceiling is lowered to it, with a warning: a limit the
process cannot honour would let connections take the descriptors the log
needs (and make the Kafka listener reset every new connection).
"""

from __future__ import annotations

import dataclasses
import logging
import resource
from typing import Final

from telemetry.enforcement.settings import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_IP,
    LimitSettings,
)

_log = logging.getLogger(__name__)

RESERVED_DESCRIPTORS: Final = 256


def descriptor_limit() -> int | None:
    """The soft ``RLIMIT_NOFILE``; None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def connection_ceilings(soft_limit: int | None) -> tuple[int, int]:
    """``(max_connections, max_connections_per_ip)`` the descriptor limit allows."""
    most = DEFAULT_MAX_CONNECTIONS
    if soft_limit is not None:
        most = max(1, min(most, soft_limit - RESERVED_DESCRIPTORS))
    return most, max(1, min(DEFAULT_MAX_CONNECTIONS_PER_IP, most // 2))


def fit_to_descriptors(limits: LimitSettings, soft_limit: int | None) -> LimitSettings:
    """``limits`` with the connection counts lowered to the ceiling; explicit values warned."""
    ceilings = dict(
        zip(
            ("max_connections", "max_connections_per_ip"),
            connection_ceilings(soft_limit),
            strict=True,
        )
    )
    defaults = {
        "max_connections": DEFAULT_MAX_CONNECTIONS,
        "max_connections_per_ip": DEFAULT_MAX_CONNECTIONS_PER_IP,
    }
    changes = {}
    for name, ceiling in ceilings.items():
        value = getattr(limits, name)
        if value <= ceiling:
            continue
        changes[name] = ceiling
        if value != defaults[name]:
            _log.warning(
                "limits.%s = %d is above what %d file descriptors allow: lowered to %d",
                name,
                value,
                soft_limit,
                ceiling,
            )
    return dataclasses.replace(limits, **changes) if changes else limits
