"""The HTTP door's settings: ``[forward]``, the broker plugin's route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

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
