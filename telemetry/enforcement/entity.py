"""Who a request is from, as client quotas see it: a user principal and a client id."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ClientEntity"]


class ClientEntity(NamedTuple):
    """The user (principal name, ``ANONYMOUS`` until SASL) and the header's client id.

    Kafka reads a null client id as ``""``, which quota resolution treats as
    a client id like any other (only ``<default>`` entities match it).
    """

    user: str
    client_id: str

    def __str__(self) -> str:
        return f"user={self.user!r} client_id={self.client_id!r}"
