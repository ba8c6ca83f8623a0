"""``kip714 rollup --config FILE``: the server's ``[lake]`` as the job's catalog arguments.

``spark_jobs`` imports nothing of the server, so the CLI reads the config
file's ``[lake]`` table and hands the job plain arguments (``--catalog-uri``,
``--warehouse``, ``--namespace``); arguments given on the command line win.
Without ``[lake]`` keys the job's defaults apply: ``<data_dir>/lake/``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["RollupConfigError", "rollup_argv"]


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


def rollup_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--config FILE`` replaced by the lake arguments it implies.

    Raises:
        RollupConfigError: unreadable file, or an unusable ``[lake]``.
    """
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
    if config is None:
        return rest
    try:
        document = tomllib.loads(Path(config).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise RollupConfigError(f"--config {config}: {error}") from None
    lake = document.get("lake", {})
    if not isinstance(lake, dict):
        raise RollupConfigError("lake: expected a table")
    implied = {
        "--catalog-uri": _catalog_uri(lake.get("catalog")),
        "--warehouse": lake.get("warehouse"),
        "--namespace": lake.get("namespace"),
    }
    for flag, value in implied.items():
        if value is not None and not _given(rest, flag):
            rest += [flag, str(value)]
    return rest
