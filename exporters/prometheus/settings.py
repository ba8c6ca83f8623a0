"""The ``prometheus`` exporter's options, checked once when the factory is called."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from exporters.options import check_keys, int_option
from exporters.prometheus.series import IDENTITY_LABELS, SeriesLimits

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DEFAULT_LISTEN", "PrometheusSettings"]

#: The OpenTelemetry Prometheus exporter's port.
DEFAULT_LISTEN: Final = "127.0.0.1:9464"
_LIMITS: Final = SeriesLimits()
_DEFAULTS: Final[dict[str, Any]] = {
    "listen": DEFAULT_LISTEN,
    "max_series": _LIMITS.max_series,
    "max_label_value_bytes": _LIMITS.max_label_value_bytes,
    "max_labels_per_series": _LIMITS.max_labels_per_series,
    "max_bytes": _LIMITS.max_bytes,
}
#: A series always has the identity labels and ``broker_id``: fewer would drop some of them.
_MIN_LABELS: Final = len(IDENTITY_LABELS) + 1


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """Where to serve ``GET /metrics``, and the bounds of what is kept for it."""

    host: str
    port: int
    limits: SeriesLimits

    @property
    def max_series(self) -> int:
        return self.limits.max_series

    @classmethod
    def from_options(cls, config: Mapping[str, Any]) -> PrometheusSettings:
        """Raises ``TypeError`` (unknown option) or ``ValueError`` (bad value)."""
        check_keys(config, frozenset(_DEFAULTS), "prometheus")
        options = {**_DEFAULTS, **config}
        host, port = _listen(options["listen"])
        limits = SeriesLimits(
            max_series=int_option(options, "max_series", 1),
            max_label_value_bytes=int_option(options, "max_label_value_bytes", 1),
            max_labels_per_series=int_option(options, "max_labels_per_series", _MIN_LABELS),
            max_bytes=int_option(options, "max_bytes", 1),
        )
        return cls(host, port, limits)


def _listen(value: Any) -> tuple[str, int]:
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if sep and host and port.isdigit() and int(port) <= 65535:
            return host, int(port)
    raise ValueError(f"option 'listen' must be HOST:PORT (port 0: any free port): {value!r}")
