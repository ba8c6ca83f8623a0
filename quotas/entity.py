"""Quota entities: (user, client-id) pairs with ``<default>`` at each level.

Kafka resolves which configured entity governs a client in a fixed 8-step
order (``DefaultQuotaCallback.quotaMetricTags``), and the resulting metric
tags decide which clients share one sensor: tags (user, "") make every
client-id of a user share one quota; ("", client-id) share across users.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from quotas.config import Quota

#: The entity name that stands for "any user" / "any client-id" (``ConfigEntityName.DEFAULT``).
DEFAULT = "<default>"


class QuotaTypes(enum.IntFlag):
    """Kafka's ``quotaTypesEnabled`` bits."""

    NO_QUOTAS = 0
    CLIENT_ID_QUOTA_ENABLED = 1
    USER_QUOTA_ENABLED = 2
    USER_CLIENT_ID_QUOTA_ENABLED = 4
    CUSTOM_QUOTAS = 8


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: Java's ``URLEncoder``, then ``*``→%2A and ``+``→%20.

    Users are sanitized in metric tags and sensor names (principals may hold
    any character); client ids are not (``testClientIdNotSanitized``).
    """
    # Java's URLEncoder leaves [A-Za-z0-9.-*_] alone; quote() also leaves "~",
    # which Java encodes.
    return quote(name, safe="").replace("~", "%7E")


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A configured quota entity; ``user`` is sanitized, ``None`` means "not part of it"."""

    user: str | None
    client_id: str | None

    @classmethod
    def of(cls, user: str | None, client_id: str | None) -> QuotaEntity:
        if user is None and client_id is None:
            raise ValueError("A quota entity needs a user, a client-id, or both.")
        return cls(sanitize_user(user), client_id)

    @property
    def quota_type(self) -> QuotaTypes:
        if self.user is not None and self.client_id is not None:
            return QuotaTypes.USER_CLIENT_ID_QUOTA_ENABLED
        if self.user is not None:
            return QuotaTypes.USER_QUOTA_ENABLED
        return QuotaTypes.CLIENT_ID_QUOTA_ENABLED

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"user {self.user}")
        if self.client_id is not None:
            parts.append(f"client-id {self.client_id}")
        return ", ".join(parts)


def sanitize_user(user: str | None) -> str | None:
    """Sanitize a principal name, leaving ``None`` and ``DEFAULT`` as they are."""
    if user is None or user == DEFAULT:
        return user
    return sanitize(user)


def quota_metric_tags(
    overrides: Mapping[QuotaEntity, Quota], enabled: int, sanitized_user: str, client_id: str
) -> tuple[str, str]:
    """The (user, client-id) tags of the sensor a client records into.

    The bitmask fast paths are Kafka's; with several levels configured the
    first configured entity in Kafka's order decides.
    """
    if enabled in (QuotaTypes.NO_QUOTAS, QuotaTypes.CLIENT_ID_QUOTA_ENABLED):
        return ("", client_id)
    if enabled == QuotaTypes.USER_QUOTA_ENABLED:
        return (sanitized_user, "")
    if enabled == QuotaTypes.USER_CLIENT_ID_QUOTA_ENABLED:
        return (sanitized_user, client_id)
    user_level = (
        (QuotaEntity(sanitized_user, client_id), (sanitized_user, client_id)),  # 1
        (QuotaEntity(sanitized_user, DEFAULT), (sanitized_user, client_id)),  # 2
        (QuotaEntity(sanitized_user, None), (sanitized_user, "")),  # 3
        (QuotaEntity(DEFAULT, client_id), (sanitized_user, client_id)),  # 4
        (QuotaEntity(DEFAULT, DEFAULT), (sanitized_user, client_id)),  # 5
        (QuotaEntity(DEFAULT, None), (sanitized_user, "")),  # 6
    )
    for entity, tags in user_level:
        if entity in overrides:
            return tags
    # 7 and 8: /clients/<client-id>, /clients/<default> (or nothing at all).
    return ("", client_id)


def quota_limit(
    overrides: Mapping[QuotaEntity, Quota], user_tag: str, client_tag: str
) -> Quota | None:
    """The quota that applies to a sensor's tags, most specific entity first (``quotaLimit``)."""
    if user_tag and client_tag:
        candidates: tuple[QuotaEntity, ...] = (
            QuotaEntity(user_tag, client_tag),
            QuotaEntity(user_tag, DEFAULT),
            QuotaEntity(DEFAULT, client_tag),
            QuotaEntity(DEFAULT, DEFAULT),
        )
    elif user_tag:
        candidates = (QuotaEntity(user_tag, None), QuotaEntity(DEFAULT, None))
    elif client_tag:
        candidates = (QuotaEntity(None, client_tag), QuotaEntity(None, DEFAULT))
    else:
        return None
    for entity in candidates:
        quota = overrides.get(entity)
        if quota is not None:
            return quota
    return None
