"""The push path runs compiled, and a stale compiled module stops the tests."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import os
import shutil
from pathlib import Path

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
