"""``quotas`` is pure: standard library only, no I/O, no event loop, no clock."""

from __future__ import annotations

import ast
from pathlib import Path

import quotas

ALLOWED = {
    "__future__",
    "array",  # the sample rings: flat doubles instead of an object per window
    "collections",
    "dataclasses",
    "enum",
    "ipaddress",  # parses IP text; no resolution
    "math",
    "quotas",
    "sys",  # sys.float_info only
    "threading",  # locks: recording is safe from worker threads
    "typing",
    "urllib",  # urllib.parse.quote for Kafka's Sanitizer
}
FORBIDDEN_NAMES = {"time", "monotonic", "perf_counter", "datetime", "open", "socket", "asyncio"}

SOURCES = sorted(Path(quotas.__file__).parent.glob("*.py"))


def test_there_are_sources_to_check() -> None:
    assert len(SOURCES) >= 10


def test_quotas_imports_only_the_allowed_standard_library() -> None:
    offenders = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                roots = [(node.module or "").split(".")[0]]
            else:
                continue
            offenders += [f"{path.name}: {root}" for root in roots if root not in ALLOWED]
    assert offenders == []


def test_quotas_never_reads_the_clock_or_does_io() -> None:
    offenders = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            name = None
            if isinstance(node, ast.Name):
                name = node.id
            elif isinstance(node, ast.Attribute):
                name = node.attr
            if name in FORBIDDEN_NAMES:
                offenders.append(f"{path.name}:{getattr(node, 'lineno', 0)}: {name}")
    assert offenders == []
