"""The one table of the Kafka APIs a listener serves: key, name, versions, handler.

Every API is one row, registered by the part of the server that answers
it: the KIP-714 APIs by ``telemetry.kafka.apis``, SASL by
``telemetry.kafka.authenticator``, the admin APIs and SCRAM credentials by
``telemetry.admin`` (an :class:`ApiSet`, so this package never imports the
admin plane). The dispatcher looks the request's key up here, and
ApiVersions lists exactly these rows, in registration order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from telemetry.wire import ApiVersion

if TYPE_CHECKING:
    from collections.abc import Callable

    from telemetry.kafka.connection import PendingResponse
    from telemetry.kafka.connection_state import ConnectionState

    #: (connection, request frame, perf_counter_ns at receipt) -> the answer, or a pending one.
    ApiHandler = Callable[[ConnectionState, bytes, int], tuple[bytes, int] | PendingResponse]

__all__ = ["ApiSet", "ApiTable", "ServedApi"]


@dataclass(frozen=True, slots=True)
class ServedApi:
    """One row: what ApiVersions advertises for the key, and who answers it."""

    versions: ApiVersion
    #: Kafka's ``ApiKeys`` name: what the listener's request counters say.
    name: str
    handler: ApiHandler


class ApiTable:
    """Rows by api key; ``charge`` records a request's time against its client's quotas.

    ``charge(state, started_ns, mutation_throttle_ms)`` returns the throttle
    the response carries (KIP-124 request time, KIP-599 mutations).
    """

    def __init__(self, charge: Callable[[ConnectionState, int, int], int]) -> None:
        self.charge = charge
        self._rows: dict[int, ServedApi] = {}

    def register(
        self, api_key: int, name: str, versions: tuple[int, int], handler: ApiHandler
    ) -> None:
        """Add one served API; a key is answered by one handler only."""
        if api_key in self._rows:
            raise ValueError(f"api key {api_key} is already served by {self._rows[api_key].name}")
        low, high = versions
        self._rows[api_key] = ServedApi(
            ApiVersion(api_key=api_key, min_version=low, max_version=high), name, handler
        )

    def get(self, api_key: int) -> ServedApi | None:
        return self._rows.get(api_key)

    @property
    def advertised(self) -> tuple[ApiVersion, ...]:
        """ApiVersions' ``api_keys``: every row, in the order they were registered."""
        return tuple(row.versions for row in self._rows.values())


class ApiSet(Protocol):
    """APIs served from outside this package (the admin plane's), registered into the table."""

    def register(self, table: ApiTable) -> None: ...
