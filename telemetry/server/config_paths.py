"""Relative paths in a config file are relative to the file's directory.

A file copied with its certificates, or started by a supervisor from another
working directory, must name the same places: so every path a config file
states (``data_dir``, an exporter's ``path``, a local ``warehouse`` and a
``sqlite:`` catalog, in ``[lake]`` or an exporter's options, the TLS
files and ``[alerts] rules``) is made absolute against the file's directory before the sections
are parsed. Paths given on the command line (``--data-dir``) stay relative
to the working directory, as every command line does. Only ``tomllib``-level
work here: ``kip714 rollup`` and ``report`` use it without the server.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

__all__ = ["resolve_relative_paths"]

_SQLITE = "sqlite:///"
_TLS_FILES = ("certfile", "keyfile", "cafile")


def _path(value: object, base: Path) -> object:
    if not isinstance(value, str) or not value or "://" in value:
        return value
    return value if Path(value).is_absolute() else str(base / value)


def _sqlite(uri: object, base: Path) -> object:
    """``sqlite:///relative.db`` (three slashes: relative) -> ``sqlite:////abs/relative.db``."""
    if not isinstance(uri, str) or not uri.startswith(_SQLITE):
        return uri
    rest = uri.removeprefix(_SQLITE)
    if not rest or rest.startswith("/") or rest == ":memory:":
        return uri
    return _SQLITE + str(base / rest)


def _lake_like(table: dict[str, Any], base: Path) -> None:
    """``warehouse`` and ``catalog`` (a table with ``uri``, or a bare URI) in place."""
    if "warehouse" in table:
        table["warehouse"] = _path(table["warehouse"], base)
    catalog = table.get("catalog")
    if isinstance(catalog, dict) and "uri" in catalog:
        catalog["uri"] = _sqlite(catalog["uri"], base)
    elif catalog is not None:
        table["catalog"] = _sqlite(catalog, base)


def resolve_relative_paths(document: dict[str, Any], config_path: Path) -> dict[str, Any]:
    """A copy of ``document`` with its relative paths made absolute against ``config_path``'s dir.

    Values of the wrong type are left as they are: the section's parser
    refuses them, naming the key.
    """
    base = Path(os.path.abspath(config_path)).parent
    resolved = copy.deepcopy(document)
    if "data_dir" in resolved:
        resolved["data_dir"] = _path(resolved["data_dir"], base)
    lake = resolved.get("lake")
    if isinstance(lake, dict):
        _lake_like(lake, base)
    exporters = resolved.get("exporters")
    if isinstance(exporters, dict):
        for exporter in exporters.values():
            options = exporter.get("options") if isinstance(exporter, dict) else None
            if isinstance(options, dict):
                if "path" in options:
                    options["path"] = _path(options["path"], base)
                _lake_like(options, base)
    alerts = resolved.get("alerts")
    if isinstance(alerts, dict) and "rules" in alerts:
        alerts["rules"] = _path(alerts["rules"], base)
    for listener in ("kafka", "http"):
        section = resolved.get(listener)
        tls = section.get("tls") if isinstance(section, dict) else None
        if isinstance(tls, dict):
            for name in _TLS_FILES:
                if name in tls:
                    tls[name] = _path(tls[name], base)
    return resolved
