"""One KIP-714 client instance: who it is, what it is subscribed to, when it last spoke.

Kafka's ``ClientMetricsInstanceMetadata`` and ``ClientMetricsInstance``. The
state is deliberately small and replaced, not patched, when subscriptions
change: Kafka builds a fresh instance (timestamps back to 0, not terminating,
no last error) whenever its subscription version is stale, and so do we.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from telemetry.core.client_uuid import Uuid
from telemetry.errors import ErrorCode

__all__ = ["ClientInstance", "ClientInstanceMetadata", "RequestContext"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    """What the listener knows about the request's connection.

    ``client_software_name``/``version`` come from ApiVersions v3+ on the same
    connection (``None`` when the client never sent them). ``connection_id``
    ties the instance to a connection so a disconnect drops it (KAFKA-17778);
    ``None`` means "no connection to follow" (e.g. a stateless HTTP call).
    """

    client_id: str
    client_source_address: str
    client_source_port: int
    client_software_name: str | None = None
    client_software_version: str | None = None
    connection_id: str | None = None
    principal: str = "User:ANONYMOUS"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientInstanceMetadata:
    """The attributes ``match`` patterns select on, captured when the instance is created."""

    client_instance_id: Uuid
    client_id: str
    client_software_name: str | None
    client_software_version: str | None
    client_source_address: str
    client_source_port: int

    @classmethod
    def from_context(
        cls, client_instance_id: Uuid, context: RequestContext
    ) -> ClientInstanceMetadata:
        return cls(
            client_instance_id=client_instance_id,
            client_id=context.client_id,
            client_software_name=context.client_software_name,
            client_software_version=context.client_software_version,
            client_source_address=context.client_source_address,
            client_source_port=context.client_source_port,
        )

    def attribute(self, key: str) -> str | None:
        """The attribute as Kafka's matcher sees it: base64 id, decimal port, else ``None``."""
        attributes = {
            "client_instance_id": str(self.client_instance_id),
            "client_id": self.client_id,
            "client_software_name": self.client_software_name,
            "client_software_version": self.client_software_version,
            "client_source_address": self.client_source_address,
            "client_source_port": str(self.client_source_port),
        }
        return attributes.get(key)

    def is_match(self, patterns: Mapping[str, re.Pattern[str]]) -> bool:
        """Every pattern must match its whole attribute; no patterns match everyone.

        An unknown key or an absent attribute (no software name) never matches.
        """
        for key, pattern in patterns.items():
            value = self.attribute(key)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


class ClientInstance:
    """Mutable per-instance state, guarded by the gating rules of ``ClientMetricsInstance``."""

    __slots__ = (
        "last_get_request_ms",
        "last_known_error",
        "last_push_request_ms",
        "last_terminating_push_ms",
        "metadata",
        "metrics",
        "push_interval_ms",
        "subscription_id",
        "subscription_version",
        "terminating",
    )

    def __init__(
        self,
        *,
        metadata: ClientInstanceMetadata,
        subscription_id: int,
        subscription_version: int,
        metrics: tuple[str, ...],
        push_interval_ms: int,
    ) -> None:
        if push_interval_ms <= 0:
            # Clients push in a tight loop on an interval of 0 (librdkafka
            # measured ~480 pushes in 0.5 s); subscriptions never allow it.
            raise ValueError(f"push interval must be positive, got {push_interval_ms}")
        self.metadata = metadata
        self.subscription_id = subscription_id
        self.subscription_version = subscription_version
        self.metrics = metrics
        self.push_interval_ms = push_interval_ms
        # Kafka starts both at 0, so the first request of a fresh instance
        # passes the gate as long as now >= interval (true at any real epoch).
        self.last_get_request_ms = 0
        self.last_push_request_ms = 0
        self.last_terminating_push_ms = 0
        self.terminating = False
        self.last_known_error = ErrorCode.NONE

    @property
    def client_instance_id(self) -> Uuid:
        return self.metadata.client_instance_id

    def maybe_update_get_request_timestamp(self, now_ms: int) -> bool:
        """Allow a GET once a full interval passed since the last GET or accepted push."""
        last_request_ms = max(self.last_get_request_ms, self.last_push_request_ms)
        if now_ms - last_request_ms >= self.push_interval_ms:
            self.last_get_request_ms = now_ms
            return True
        return False

    def maybe_update_push_request_timestamp(self, now_ms: int) -> bool:
        """Allow a push a full interval after the last one, or the first push after a GET.

        The exemption exists because clients jitter the first push after a
        GET (librdkafka 0.8–1.2 × interval, Java 0.5–1.5 ×), so it may come
        early. The slot is consumed (``last_push_request_ms`` moves) whenever
        this returns ``True``, even if a later check refuses the push.
        """
        accepted = self.last_get_request_ms > self.last_push_request_ms
        if not accepted:
            accepted = now_ms - self.last_push_request_ms >= self.push_interval_ms
        if accepted:
            self.last_push_request_ms = now_ms
        return accepted

    def maybe_update_terminating_push_timestamp(self, now_ms: int) -> bool:
        """The gate for a terminating push: the first push after a GET, or one per interval.

        Kafka lets a terminating push past the interval gate unconditionally,
        which is harmless there because the push then locks the instance even
        if it fails. kip714 locks only on success (KAFKA-20898), so without a
        bound a client could send failing terminating pushes (each one
        decompressed) without limit. Allowed: the first push after a GET (the
        retry after 117/76, whose GET is exempt from the GET gate), or one
        terminating push per interval otherwise, whatever the regular gate
        says (a client closing right after a regular push). Either way the
        push slot is consumed, so one GET admits one push.
        """
        accepted = (
            self.last_get_request_ms > self.last_push_request_ms
            or now_ms - self.last_terminating_push_ms >= self.push_interval_ms
        )
        if accepted:
            self.last_push_request_ms = now_ms
            self.last_terminating_push_ms = now_ms
        return accepted

    def __repr__(self) -> str:
        return (
            f"ClientInstance(id={self.client_instance_id}, subscription_id={self.subscription_id},"
            f" version={self.subscription_version}, interval={self.push_interval_ms},"
            f" last_get={self.last_get_request_ms}, last_push={self.last_push_request_ms},"
            f" terminating={self.terminating}, last_error={self.last_known_error.name})"
        )
