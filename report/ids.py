"""A client instance id in the two forms operators meet it in.

Kafka's tools print a ``Uuid`` as URL-safe base64 without padding (22
characters; ``Uuid.toString()``), which is how the lake stores it.
librdkafka logs the same 16 bytes as standard base64 without padding
(``zWK2pF46SmuP0OwR9vjn/w``: shared/reference/librdkafka-client-behaviour.md),
so a librdkafka user grepping their client's log needs that form.
"""

from __future__ import annotations

import base64
import binascii

from health_rules.versions import WRAPPED_RDKAFKA

__all__ = ["is_librdkafka", "librdkafka_form"]


def librdkafka_form(kafka_form: str) -> str | None:
    """The standard-base64 form of a Kafka-form id; ``None`` when it is not a 22-char Uuid."""
    if len(kafka_form) != 22:
        return None
    try:
        raw = base64.urlsafe_b64decode(kafka_form + "==")
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 16:
        return None
    return base64.b64encode(raw).decode("ascii").rstrip("=")


def is_librdkafka(software_name: str | None, software_version: str | None) -> bool:
    """librdkafka itself, or a binding that names its librdkafka (``2.6.0-rdkafka-2.6.1``)."""
    return software_name == "librdkafka" or WRAPPED_RDKAFKA in (software_version or "")
