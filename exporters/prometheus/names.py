"""OpenTelemetry metric names and units as Prometheus names, per the OpenTelemetry specification.

"Prometheus and OpenMetrics Compatibility", OTLP metric points to
Prometheus: characters outside ``[a-zA-Z0-9_:]`` become ``_`` and runs of
``_`` collapse to one; a leading digit gets a ``_`` prefix; the unit,
spelled out (``ms`` -> ``milliseconds``, ``By`` -> ``bytes``, ``1/s`` ->
``per_second``), is appended unless the name already ends with it, with
annotations in braces (``{request}``) dropped; unit ``1`` on a gauge becomes
``ratio``; monotonic sums end in ``_total`` (added by the counter family).
Attribute keys become label names by the same character rule.
"""

from __future__ import annotations

import re
from typing import Final, Literal

__all__ = ["Kind", "label_name", "metric_name"]

Kind = Literal["gauge", "counter", "histogram"]

_INVALID: Final = re.compile(r"[^a-zA-Z0-9_:]")
_INVALID_LABEL: Final = re.compile(r"[^a-zA-Z0-9_]")
_RUNS: Final = re.compile(r"__+")
_ANNOTATION: Final = re.compile(r"\{[^}]*\}")

_UNITS: Final = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "%": "percent",
}
_PER_UNITS: Final = {
    "s": "second",
    "m": "minute",
    "h": "hour",
    "d": "day",
    "w": "week",
    "mo": "month",
    "y": "year",
}


def metric_name(name: str, unit: str | None, kind: Kind) -> str:
    """The Prometheus name, without the ``_total`` a counter family adds itself."""
    base = _clean(name, _INVALID)
    if base.endswith("_total") and kind == "counter":
        base = base[: -len("_total")]
    suffix = _unit_suffix(unit or "", kind)
    if suffix and not base.endswith(f"_{suffix}"):
        base = f"{base}_{suffix}"
    return base


def label_name(key: str) -> str:
    return _clean(key, _INVALID_LABEL)


def _clean(text: str, invalid: re.Pattern[str]) -> str:
    cleaned = _RUNS.sub("_", invalid.sub("_", text))
    if not cleaned or cleaned[0].isdigit():
        cleaned = f"_{cleaned}"
    return cleaned


def _unit_suffix(unit: str, kind: Kind) -> str:
    unit = _ANNOTATION.sub("", unit).strip()
    if unit == "1":
        return "ratio" if kind == "gauge" else ""
    if not unit:
        return ""
    main, _, per = unit.partition("/")
    words = [_UNITS.get(main, main)] if main else []
    if per:
        words += ["per", _PER_UNITS.get(per, per)]
    return _clean("_".join(words), _INVALID).strip("_")
