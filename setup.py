"""Compiles the push path with mypyc; everything else in pyproject.toml.

A push crosses about 55 Python frames (docs/architecture.md, "Where a
request's CPU goes") and no one of them is worth a hand-written extension:
the interpreter's per-frame cost is the limit. mypyc turns these typed
modules into C extensions as they are, so the source stays the one truth
and mypy --strict already checks what mypyc relies on.

``KIP714_PURE_PYTHON=1`` builds without compiling (no C compiler needed):
the same code, slower. An editable install puts the compiled modules beside
their sources; after editing one of them, run ``pip install -e .`` again
(the tests refuse a compiled module older than its source).
"""

from __future__ import annotations

import os
import tomllib

from mypyc.build import mypycify
from setuptools import setup

#: The build environment has mypy and the libraries the compiled modules
#: import (pyproject.toml's build requirements), not every runtime
#: dependency: what it cannot import is typed Any (checked at run time by
#: the callee), and only the compiled modules' own errors stop the build.
#: `mypy` itself, with every dependency installed, is the type check
#: (scripts/check.sh).
_MYPY_ARGS = [
    "--config-file=pyproject.toml",
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--no-warn-unused-ignores",
]


def _extensions() -> list[object]:
    if os.environ.get("KIP714_PURE_PYTHON") == "1":
        return []
    with open("pyproject.toml", "rb") as file:
        compiled = tomllib.load(file)["tool"]["kip714"]["compiled"]
    return list(mypycify([*_MYPY_ARGS, *compiled], opt_level="3"))


setup(ext_modules=_extensions())
