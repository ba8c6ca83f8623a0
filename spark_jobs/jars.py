"""The Iceberg runtime and the catalogs' JDBC drivers, resolved by the project's pom into a cache.

The jars: Iceberg's Spark runtime, the SQLite driver (the embedded catalog)
and the PostgreSQL driver (a catalog several machines share).

Why not only ``spark.jars.packages``: Ivy resolves the coordinates again at
every session start (seconds on a small run) and needs its own cache; a
plain directory of jars, fetched once by Maven, starts nothing. Where
Maven is not installed the session falls back to ``spark.jars.packages``
with the same coordinates, so a user without ``mvn`` still gets the jars.

The cache entry is written atomically (a temporary directory renamed into
place), so two processes fetching at once both end with a whole directory.
Its name is derived from the jar list, so a cache filled before a jar
joined the list is never taken for the new one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = [
    "ICEBERG_PACKAGES",
    "JarsUnavailableError",
    "cache_dir",
    "cache_root",
    "iceberg_jars",
    "main",
]

ICEBERG_PACKAGES: tuple[str, ...] = (
    "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0",
    "org.xerial:sqlite-jdbc:3.50.3.0",
    "org.postgresql:postgresql:42.7.13",
)
"""Maven coordinates; keep equal to ``iceberg-runtime.pom.xml``."""

_POM = Path(__file__).with_name("iceberg-runtime.pom.xml")
_MAVEN_TIMEOUT_S = 600.0
_DONE = ".complete"


class JarsUnavailableError(RuntimeError):
    """Maven ran and failed (offline, no such version): the run cannot read the lake."""


def cache_root() -> Path:
    """``$KIP714_CACHE`` or ``~/.cache/kip714``, shared with the test tooling."""
    return Path(os.environ.get("KIP714_CACHE") or Path.home() / ".cache" / "kip714")


def cache_dir() -> Path:
    """Where the jars are, under ``cache_root()``: named by a digest of ``ICEBERG_PACKAGES``."""
    digest = hashlib.sha256("\n".join(ICEBERG_PACKAGES).encode()).hexdigest()[:12]
    return cache_root() / f"spark-iceberg-1.12.0-{digest}"


def _cached(target: Path) -> list[Path] | None:
    if not (target / _DONE).exists():
        return None
    return sorted(target.glob("*.jar"))


def iceberg_jars() -> list[Path] | None:
    """Paths of the jars, fetched by Maven on first use; None when Maven is not installed.

    Raises:
        JarsUnavailableError: Maven is installed but could not fetch the jars.
    """
    target = cache_dir()
    jars = _cached(target)
    if jars is not None:
        return jars
    maven = shutil.which("mvn")
    if maven is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        result = subprocess.run(
            [maven, "-B", "-q", "-f", str(_POM), "dependency:copy-dependencies",
             "-DexcludeTransitive=true", f"-DoutputDirectory={staging}"],
            check=False, timeout=_MAVEN_TIMEOUT_S, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        if result.returncode != 0:
            raise JarsUnavailableError(
                f"mvn could not fetch {', '.join(ICEBERG_PACKAGES)}: "
                f"{result.stdout.strip().splitlines()[-1:]}"
            )
        (staging / _DONE).touch()
        try:
            staging.rename(target)
        except OSError:  # another process renamed its copy first: use that one
            if _cached(target) is None:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _cached(target)


def main() -> int:
    """``python -m spark_jobs.jars``: the jars, comma-separated, for ``spark-submit --jars``."""
    jars = iceberg_jars()
    if jars is None:
        print(f"mvn not found: use spark-submit --packages {','.join(ICEBERG_PACKAGES)}")
        return 1
    print(",".join(str(jar) for jar in jars))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
