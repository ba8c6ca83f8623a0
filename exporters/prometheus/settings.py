"""The ``prometheus`` exporter's options, checked once when the factory is called."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from exporters.options import check_keys, int_option

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DEFAULT_LISTEN", "PrometheusSettings"]

#: The OpenTelemetry Prometheus exporter's port.
DEFAULT_LISTEN: Final = "127.0.0.1:9464"
_DEFAULTS: Final[dict[str, Any]] = {"listen": DEFAULT_LISTEN, "max_series": 100_000}


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """Where to serve ``GET /metrics``, and how many series to keep at most."""

    host: str
    port: int
    max_series: int

    @classmethod
    def from_options(cls, config: Mapping[str, Any]) -> PrometheusSettings:
        """Raises ``TypeError`` (unknown option) or ``ValueError`` (bad value)."""
        check_keys(config, frozenset(_DEFAULTS), "prometheus")
        options = {**_DEFAULTS, **config}
        host, port = _listen(options["listen"])
        return cls(host, port, int_option(options, "max_series", 1))


def _listen(value: Any) -> tuple[str, int]:
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if sep and host and port.isdigit() and int(port) <= 65535:
            return host, int(port)
    raise ValueError(f"option 'listen' must be HOST:PORT (port 0: any free port): {value!r}")
