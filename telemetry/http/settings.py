"""The HTTP door's settings: ``[forward]``, the broker plugin's route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from telemetry import toml_checks as toml

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The plugin's batches are 4 MiB by default; a single push may be larger.
DEFAULT_MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardSettings:
    """``[forward]``: the token brokers present, and the largest request taken.

    ``token`` ``None`` disables the route (403): an open forward endpoint
    would let anyone write data that claims to come from the cluster.
    """

    token: str | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES


def parse_forward(section: Mapping[str, Any]) -> ForwardSettings:
    token = section.get("token")
    return ForwardSettings(
        token=None if token is None else toml.string("forward.token", token),
        max_request_bytes=toml.integer(
            "forward.max_request_bytes",
            section.get("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES),
            1024,
        ),
    )
