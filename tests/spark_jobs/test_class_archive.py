"""The driver JVM's class-data-sharing archive: built at exit, used when whole, never heard.

The JVM runs here are Spark's launcher (``org.apache.spark.launcher.Main``,
one jar, well under a second), not a Spark session: what is tested is the
cache's life cycle and what the JVM does with the options it gets.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from pyspark.find_spark_home import _find_spark_home

from spark_jobs.class_archive import (
    ARCHIVE_MAGIC,
    QUIET,
    archive_key,
    java_binary,
    jvm_options,
)

SPARK_HOME = Path(_find_spark_home())  # type: ignore[no-untyped-call]
LAUNCHER = next((SPARK_HOME / "jars").glob("spark-launcher_*.jar"))


@pytest.fixture
def cds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own cache; its ``cds`` directory."""
    monkeypatch.setenv("KIP714_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cds"


def java() -> Path:
    found = java_binary()
    assert found is not None
    return found


def launch(options: list[str], jar: Path = LAUNCHER) -> tuple[int, str, str]:
    """Spark's launcher printing the driver command: the same output whatever the archive."""
    result = subprocess.run(
        [str(java()), *options, "-cp", str(jar), "org.apache.spark.launcher.Main",
         "org.apache.spark.deploy.SparkSubmit", "--version"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_SCALA_VERSION": "2.13"},
    )  # fmt: skip
    return result.returncode, result.stdout, result.stderr


def archive_of(cds: Path, jar: Path = LAUNCHER) -> Path:
    return cds / f"{archive_key(java(), [jar])}.jsa"


def test_a_run_without_an_archive_has_the_jvm_write_one_that_the_next_run_uses(
    cds: Path, tmp_path: Path
) -> None:
    plain = launch([])
    assert plain[0] == 0 and "SparkSubmit" in plain[1]

    first = jvm_options([LAUNCHER])
    assert first[0].startswith("-XX:ArchiveClassesAtExit=") and first[1:] == [QUIET]
    assert launch(first) == plain  # the dump prints nothing (it would be thousands of lines)

    archive = archive_of(cds)
    assert jvm_options([LAUNCHER]) == [f"-XX:SharedArchiveFile={archive}", QUIET]
    assert archive.read_bytes()[:4] == ARCHIVE_MAGIC
    assert list(cds.glob(".*.part")) == []  # renamed into place, not copied

    loaded = tmp_path / "classes.log"
    assert launch([*jvm_options([LAUNCHER]), f"-Xlog:class+load=info:file={loaded}"]) == plain
    assert "source: shared objects file (top)" in loaded.read_text()


def test_a_new_jar_gives_a_new_key_and_a_new_archive(cds: Path, tmp_path: Path) -> None:
    jar = tmp_path / LAUNCHER.name
    shutil.copy2(LAUNCHER, jar)
    cds.mkdir(parents=True)
    old = archive_of(cds, jar)
    old.write_bytes(ARCHIVE_MAGIC + bytes(64))
    assert jvm_options([jar]) == [f"-XX:SharedArchiveFile={old}", QUIET]

    stat = jar.stat()
    os.utime(jar, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # a rebuilt jar
    new = archive_of(cds, jar)
    assert new != old
    rebuilt = jvm_options([jar])
    assert rebuilt[0].startswith(f"-XX:ArchiveClassesAtExit={cds}/.{new.stem}.")


def test_another_jdk_build_gives_another_key(tmp_path: Path) -> None:
    homes = []
    for version in ("17.0.15", "17.0.16"):
        home = tmp_path / version
        (home / "bin").mkdir(parents=True)
        (home / "bin" / "java").write_text("")
        (home / "release").write_text(f'JAVA_VERSION="{version}"\n')
        homes.append(home / "bin" / "java")
    assert archive_key(homes[0], [LAUNCHER]) != archive_key(homes[1], [LAUNCHER])
    assert archive_key(homes[0], [LAUNCHER]) == archive_key(homes[0], [LAUNCHER])


def test_a_corrupt_archive_is_never_passed_and_is_rebuilt(cds: Path) -> None:
    plain = launch([])
    cds.mkdir(parents=True)
    archive_of(cds).write_bytes(b"not an archive" * 100)

    options = jvm_options([LAUNCHER])
    assert options[0].startswith("-XX:ArchiveClassesAtExit=")  # not -XX:SharedArchiveFile
    assert launch(options) == plain
    assert jvm_options([LAUNCHER]) == [f"-XX:SharedArchiveFile={archive_of(cds)}", QUIET]
    assert archive_of(cds).read_bytes()[:4] == ARCHIVE_MAGIC


def test_an_archive_the_jvm_rejects_changes_nothing_the_user_sees(
    cds: Path, tmp_path: Path
) -> None:
    plain = launch([])
    other = tmp_path / "other" / LAUNCHER.name  # same classes, another classpath
    other.parent.mkdir()
    shutil.copy2(LAUNCHER, other)
    assert launch(jvm_options([other]), other)[0] == 0
    jvm_options([other])  # renames the dump into place
    os.replace(archive_of(cds, other), archive_of(cds))  # whole, but built for other jars

    options = jvm_options([LAUNCHER])
    assert options == [f"-XX:SharedArchiveFile={archive_of(cds)}", QUIET]
    assert launch(options) == plain  # no "[warning][cds] ... shared class paths mismatch"
    assert launch([f"-XX:SharedArchiveFile={archive_of(cds)}"]) != plain  # what QUIET hides


def test_a_dump_being_written_is_waited_for_and_a_dead_one_removed(cds: Path) -> None:
    cds.mkdir(parents=True)
    part = cds / f".{archive_key(java(), [LAUNCHER])}.0badcafe.part"
    part.write_bytes(bytes(4096))  # no header yet: still being written
    assert jvm_options([LAUNCHER]) == []  # no second dump meanwhile
    assert part.exists()

    long_ago = time.time() - 3600
    os.utime(part, (long_ago, long_ago))
    options = jvm_options([LAUNCHER])
    assert not part.exists()
    assert options[0].startswith("-XX:ArchiveClassesAtExit=")


def test_an_unusable_cache_means_no_archive_and_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("KIP714_CACHE", str(blocker))
    assert jvm_options([LAUNCHER]) == []
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    assert jvm_options([LAUNCHER]) == []
