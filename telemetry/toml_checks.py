"""The checks every settings parser shares: one ``ConfigError`` naming the dotted key and value.

Each component parses its own TOML section (``kafka/settings.py``,
``http/settings.py``, ``security/settings.py``, ``enforcement/settings.py``,
``admin/settings.py``, ...) with these, and ``server/config.py`` only
assembles the sections: a typo that is silently ignored is a limit that
silently does not apply, so every parser refuses unknown keys the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "array",
    "integer",
    "parse_host_port",
    "refuse_unknown",
    "seconds",
    "section",
    "string",
    "string_list",
    "table",
]


def refuse_unknown(prefix: str, table: Mapping[str, Any], known: set[str]) -> None:
    for key in table:
        if key not in known:
            raise ConfigError(
                f"{prefix}{key}", table[key], f"unknown key (known: {', '.join(sorted(known))})"
            )


def table(key: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(key, value, "expected a table")
    return value


def section(name: str, document: Mapping[str, Any], known: set[str]) -> Mapping[str, Any]:
    """``document[name]`` (empty when absent), its keys checked against ``known``."""
    found = table(name, document.get(name, {}))
    refuse_unknown(name + ".", found, known)
    return found


def array(key: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(key, value, "expected an array of tables ([[...]])")
    return value


def string(key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, value, "expected a non-empty string")
    return value


def string_list(key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(key, value, "expected a list of non-empty strings")
    return list(value)


def integer(key: str, value: object, minimum: int | None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, value, "expected an integer")
    if minimum is not None and value < minimum:
        raise ConfigError(key, value, f"must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(key, value, f"must be at most {maximum}")
    return value


def seconds(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(key, value, "expected a positive number of seconds")
    return float(value)


def parse_host_port(key: str, value: object) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9092`` for IPv6); port 0 picks a free port."""
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(key, value, "expected HOST:PORT")
    host, _, port_text = value.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(key, value, "the port is not a number") from None
    if not host or not 0 <= port <= 65535:
        raise ConfigError(key, value, "expected HOST:PORT with a port in 0..65535")
    return host, port
