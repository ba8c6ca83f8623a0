"""The push path runs compiled, and a stale compiled module stops the tests."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.metadata
import os
import shutil
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT, compiled_sources, stale_extensions


def test_every_listed_module_is_imported_compiled() -> None:
    for source in compiled_sources():
        name = ".".join(source.relative_to(ROOT).with_suffix("").parts)
        module = importlib.import_module(name)
        assert module.__file__ is not None
        assert module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), name


def test_a_source_edited_after_the_build_is_reported(tmp_path: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for source in compiled_sources(tmp_path):
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("")
        built = source.with_name(source.stem + importlib.machinery.EXTENSION_SUFFIXES[0])
        built.write_bytes(b"")
    assert stale_extensions(tmp_path) == []

    edited = compiled_sources(tmp_path)[0]
    later = edited.stat().st_mtime + 10
    os.utime(edited, (later, later))
    assert stale_extensions(tmp_path) == [str(edited.relative_to(tmp_path))]


def test_no_compiled_function_reuses_an_except_name_for_another_type() -> None:
    """mypyc gives a name one type per function: a later ``except B as e`` raises TypeError."""
    reused = []
    for source in compiled_sources():
        tree = ast.parse(source.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            types: dict[str, set[str]] = {}
            for node in ast.walk(function):
                if isinstance(node, ast.ExceptHandler) and node.name and node.type:
                    types.setdefault(node.name, set()).add(ast.unparse(node.type))
            reused += [
                f"{source.name}:{function.name}:{name}" for name, t in types.items() if len(t) > 1
            ]
    assert reused == []


def _imported_top_levels(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.partition(".")[0])
    return names


def test_the_build_environment_has_what_the_compiled_modules_import() -> None:
    """A library mypy cannot see in the build is typed Any, which fails the build on a fresh
    machine (a class based on it, an Any returned) and compiles untyped calls elsewhere."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        requires = tomllib.load(file)["build-system"]["requires"]
    required = {canonicalize_name(Requirement(spec).name) for spec in requires}
    first_party = {"telemetry", "quotas", "exporters", "durable", "spark_jobs", "report"}
    providers = importlib.metadata.packages_distributions()
    missing = set()
    for source in compiled_sources():
        for name in _imported_top_levels(source) - first_party - set(sys.stdlib_module_names):
            dists = {canonicalize_name(dist) for dist in providers.get(name, [name])}
            if not dists & required:
                missing.add(f"{source.relative_to(ROOT)}: {name} ({', '.join(sorted(dists))})")
    assert sorted(missing) == []
