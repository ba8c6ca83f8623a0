"""``kip714 rollup|report --config FILE``: the server's settings as the command's arguments.

``spark_jobs`` and ``report`` import nothing of the server, so the CLI reads
the config file and hands them plain arguments: its ``data_dir`` (relative
to the file's directory, as the server resolves it) as ``--data-dir``, and
its ``[lake]`` table as ``--catalog-uri``, ``--warehouse`` and
``--namespace``; arguments given on the command line win. Without a
``data_dir`` anywhere, the server's default ``./kip714-data`` applies. Only
``tomllib`` is used: ``kip714 rollup`` must answer an empty range quickly.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path

from telemetry.server.config_paths import resolve_relative_paths

__all__ = ["RollupConfigError", "config_document", "rollup_argv"]

#: The server's default ``--data-dir`` (``telemetry.server.config``, heavy to import here).
DEFAULT_DATA_DIR = "./kip714-data"


#: A SQLite file, or any SQLAlchemy PostgreSQL URL (``postgresql://``, ``postgresql+driver://``).
_SQL_SCHEMES = ("sqlite:///", "postgresql://", "postgresql+")


class RollupConfigError(ValueError):
    """The config file cannot be read, or its ``[lake]`` names a catalog the job cannot use."""


def _catalog_uri(raw: object) -> str | None:
    if raw is None:
        return None
    uri = raw.get("uri") if isinstance(raw, dict) else raw
    kind = raw.get("type", "sql") if isinstance(raw, dict) else "sql"
    if kind != "sql" or not isinstance(uri, str) or not uri.startswith(_SQL_SCHEMES):
        raise RollupConfigError(
            "lake.catalog: the rollups and the report read a SQL catalog on SQLite "
            f"(sqlite:///…) or PostgreSQL (postgresql+psycopg://…), not {raw!r}"
        )
    return uri


def _given(argv: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def _split_config(argv: Sequence[str]) -> tuple[list[str], str | None]:
    rest: list[str] = []
    config: str | None = None
    items = iter(argv)
    for arg in items:
        if arg == "--config":
            config = next(items, None)
            if config is None:
                raise RollupConfigError("--config needs a file")
        elif arg.startswith("--config="):
            config = arg.removeprefix("--config=")
        else:
            rest.append(arg)
    return rest, config


def config_document(config: str) -> dict[str, object]:
    """The file, its relative paths made relative to its directory (as the server reads it)."""
    try:
        document = tomllib.loads(Path(config).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise RollupConfigError(f"--config {config}: {error}") from None
    return resolve_relative_paths(document, Path(config))


def _data_dir(document: dict[str, object], config: str | None) -> str:
    """The file's ``data_dir``, relative to the file's directory; else the server's default."""
    raw = document.get("data_dir")
    if raw is None or config is None:
        return DEFAULT_DATA_DIR
    if not isinstance(raw, str) or not raw:
        raise RollupConfigError(f"data_dir: expected a non-empty string, not {raw!r}")
    return raw  # made absolute against the file's directory by _document


def rollup_argv(argv: Sequence[str], *, alert_rules: bool = False) -> list[str]:
    """``argv`` with ``--config FILE`` replaced by the lake arguments it implies.

    With ``alert_rules`` (``kip714 rollup`` and ``report``), its ``[alerts] rules`` too.

    Raises:
        RollupConfigError: unreadable file, or an unusable ``[lake]``.
    """
    rest, config = _split_config(argv)
    document = config_document(config) if config is not None else {}
    lake = document.get("lake", {})
    if not isinstance(lake, dict):
        raise RollupConfigError("lake: expected a table")
    implied = {
        "--catalog-uri": _catalog_uri(lake.get("catalog")),
        "--warehouse": lake.get("warehouse"),
        "--namespace": lake.get("namespace"),
    }
    alerts = document.get("alerts", {})
    if alert_rules and isinstance(alerts, dict) and alerts.get("rules") is not None:
        implied["--alert-rules"] = alerts["rules"]
    for flag, value in implied.items():
        if value is not None and not _given(rest, flag):
            rest += [flag, str(value)]
    if not _given(rest, "--data-dir") and not (
        _given(rest, "--catalog-uri") and _given(rest, "--warehouse")
    ):
        rest += ["--data-dir", _data_dir(document, config)]
    return rest
