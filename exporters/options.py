"""Checking an exporter's ``[exporters.NAME.options]`` table, for built-ins and plugins alike.

Factories refuse unknown keys with ``TypeError`` and bad values with
``ValueError``, each naming the option, so the registry can report
``exporters.NAME.options.KEY`` to the operator (see ``exporters.registry``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Set


def check_keys(config: Mapping[str, Any], known: Set[str], exporter: str) -> None:
    """Refuse unknown options and a missing ``path`` (every built-in needs one)."""
    unknown = sorted(set(config) - known)
    if unknown:
        raise TypeError(
            f"unknown option {unknown[0]!r} for the {exporter} exporter "
            f"(known: {', '.join(sorted(known))})"
        )
    if "path" in known and "path" not in config:
        raise TypeError(f"missing required option 'path' for the {exporter} exporter")


def path_option(config: Mapping[str, Any], what: str) -> str:
    path = config["path"]
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise ValueError(f"option 'path' must be a non-empty {what}: {path!r}")
    return os.fspath(path)


def bool_option(options: Mapping[str, Any], key: str) -> bool:
    value = options[key]
    if not isinstance(value, bool):
        raise ValueError(f"option {key!r} must be true or false: {value!r}")
    return value


def int_option(options: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int:
    value = options[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"option {key!r} must be an integer >= {low}: {value!r}")
    if high is not None and value > high:
        raise ValueError(f"option {key!r} must be at most {high}: {value!r}")
    return value


def number_option(options: Mapping[str, Any], key: str, low: float) -> float:
    value = options[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= low:
        raise ValueError(f"option {key!r} must be a number >= {low}: {value!r}")
    return float(value)
