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

Why the build is split and cached (README, "install times"): mypyc's default
output is one 35 MB C file, one ``cc1 -O3`` on one core for about 200 s, and
pip builds an editable install in a new temporary directory each time, so
every extra installed later compiled it all again. ``multi_file`` writes one
C file per module (the same code, one shared library), the files compile on
every core, and each object is kept under ``build/objects/`` keyed by the
digest of everything that reaches the compiler (the C file, the generated
headers beside it, the command line), so an install whose generated C is
unchanged compiles nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mypy.version import __version__ as mypy_version
from mypyc.build import mypycify
from setuptools import setup
from setuptools.command.build_ext import build_ext

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

#: mypyc writes its C here (its default target directory); objects live beside it.
_OBJECT_CACHE = Path("build", "objects")


#: The setup.py commands that build extensions. pip runs setup.py three times for
#: one install (requirements, metadata, the build); mypyc's type check and C
#: generation take about a minute, so they run only for the build.
_BUILD_COMMANDS = frozenset({"build", "build_ext", "bdist_wheel", "editable_wheel", "develop"})


def _extensions() -> list[object]:
    if os.environ.get("KIP714_PURE_PYTHON") == "1":
        return []
    if not _BUILD_COMMANDS.intersection(sys.argv[1:]):
        return []
    with open("pyproject.toml", "rb") as file:
        compiled = tomllib.load(file)["tool"]["kip714"]["compiled"]
    return list(mypycify([*_MYPY_ARGS, *compiled], opt_level="3", multi_file=True))


def _digest(source: str, command: list[str]) -> str:
    """What decides an object's bytes: the C file, every header mypyc wrote, the command.

    The include directories are left out of the command: pip builds in a new
    temporary environment each time, so their paths change while what they
    hold does not (mypyc's runtime headers are fixed by the pinned mypy, and
    Python's by its version, both in the digest).
    """
    digest = hashlib.sha256()
    digest.update(f"{sys.version}\0{mypy_version}\0".encode())
    digest.update("\0".join(arg for arg in command if not arg.startswith("-I")).encode())
    digest.update(Path(source).read_bytes())
    for header in sorted(Path(source).parent.glob("*.h")):
        digest.update(header.name.encode())
        digest.update(header.read_bytes())
    return digest.hexdigest()


class CachedParallelBuildExt(build_ext):
    """build_ext whose compiler runs one job per core and reuses unchanged objects."""

    def build_extensions(self) -> None:
        compiler: Any = self.compiler
        compile_one = compiler._compile
        used: set[Path] = set()

        def compile_cached(
            obj: str, src: str, ext: str, cc_args: list[str], postargs: list[str], pp: list[str]
        ) -> None:
            command = [*compiler.compiler_so, *cc_args, *postargs, *pp]
            cached = _OBJECT_CACHE / (_digest(src, command) + ".o")
            used.add(cached)
            if cached.exists():
                Path(obj).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cached, obj)
                return
            compile_one(obj, src, ext, cc_args, postargs, pp)
            _OBJECT_CACHE.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.tmp")
            shutil.copyfile(obj, partial)
            partial.replace(cached)

        def compile_all(
            sources: list[str],
            output_dir: str | None = None,
            macros: Any = None,
            include_dirs: Any = None,
            debug: bool = False,
            extra_preargs: Any = None,
            extra_postargs: Any = None,
            depends: Any = None,
        ) -> list[str]:
            macros, objects, postargs, pp, build = compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs
            )
            cc_args = compiler._get_cc_args(pp, debug, extra_preargs)
            jobs = [(obj, *build[obj]) for obj in objects if obj in build]
            # Largest first, so the long files do not start last on a busy core.
            jobs.sort(key=lambda job: -os.path.getsize(job[1]))
            with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                for future in [
                    pool.submit(compile_cached, obj, src, ext, cc_args, postargs, pp)
                    for obj, src, ext in jobs
                ]:
                    future.result()
            return list(objects)

        compiler.compile = compile_all
        super().build_extensions()
        # Keep only this build's objects: the cache holds one build, not every one.
        for stale in _OBJECT_CACHE.glob("*.o"):
            if stale not in used:
                stale.unlink()


setup(ext_modules=_extensions(), cmdclass={"build_ext": CachedParallelBuildExt})
