"""Refuses to test a compiled module older than its source.

An editable install compiles the push path (pyproject's ``[tool.kip714]
compiled``) beside its sources, and Python imports the extension before the
``.py``: after an edit, the tests would run the old code without a word.
"""

from __future__ import annotations

import importlib.machinery
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def compiled_sources(root: Path = ROOT) -> list[Path]:
    """The modules the build compiles, as listed in pyproject.toml."""
    with (root / "pyproject.toml").open("rb") as file:
        listed: list[str] = tomllib.load(file)["tool"]["kip714"]["compiled"]
    return [root / source for source in listed]


def stale_extensions(root: Path = ROOT) -> list[str]:
    """Compiled modules whose ``.py`` changed after they were built."""
    stale = []
    for source in compiled_sources(root):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            extension = source.with_name(source.stem + suffix)
            if extension.exists() and source.stat().st_mtime > extension.stat().st_mtime:
                stale.append(str(source.relative_to(root)))
    return stale


def pytest_sessionstart(session: pytest.Session) -> None:
    if stale := stale_extensions():
        pytest.exit(
            f"compiled modules older than their source: {', '.join(stale)}; "
            "rebuild them with `pip install -e .` (setup.py)",
            returncode=2,
        )


SPARK_TESTS = ROOT / "tests" / "spark_jobs"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for scripts/check.sh's two workers (``--dist loadgroup``).

    A file's tests stay in one worker, so a module's broker or server fixture starts once;
    every Spark test shares one worker, so the run starts one SparkSession JVM, not two.
    """
    for item in items:
        if any(item.iter_markers("xdist_group")):
            continue
        spark = SPARK_TESTS in item.path.parents
        group = "spark" if spark else str(item.path.relative_to(ROOT))
        item.add_marker(pytest.mark.xdist_group(group))
