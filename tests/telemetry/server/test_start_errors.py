"""Every start-up failure of ``kip714 serve``: one line, exit 2, nothing left behind (issue 36)."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from telemetry.server.data_dir_lock import DataDirLock

if TYPE_CHECKING:
    from pathlib import Path


def serve(data_dir: Path, *extra: str, http: str = "127.0.0.1:0") -> tuple[int, list[str]]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "telemetry",
            "serve",
            "--data-dir",
            str(data_dir),
            "--kafka-listen",
            "127.0.0.1:0",
            "--http-listen",
            http,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stderr.strip().splitlines()


def one_line(code: int, lines: list[str], *words: str) -> str:
    assert code == 2, lines
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("kip714: "), line
    assert "Traceback" not in line
    for word in words:
        assert word in line, line
    return line


def test_a_file_as_the_data_dir(tmp_path: Path) -> None:
    a_file = tmp_path / "data"
    a_file.write_text("not a directory")
    line = one_line(*serve(a_file), str(a_file), "another --data-dir")
    assert "not a directory" in line.lower()
    assert a_file.read_text() == "not a directory"
    one_line(*serve(a_file / "below"), str(a_file), "another --data-dir")


def test_a_locked_data_dir(tmp_path: Path) -> None:
    lock = DataDirLock.acquire(tmp_path / "data")
    try:
        one_line(*serve(tmp_path / "data"), str(tmp_path / "data"), "in use")
    finally:
        lock.release()


def test_a_catalog_that_cannot_be_opened(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the catalog's directory should be")
    config = tmp_path / "k.toml"
    config.write_text(f'[lake]\ncatalog = {{ type = "sql", uri = "sqlite:///{blocker}/c.db" }}\n')
    one_line(
        *serve(tmp_path / "new" / "data", "--config", str(config)),
        "exporters.landing",
        str(blocker),
        "check [lake] catalog",
    )
    assert not (tmp_path / "new").exists()  # this start created it: removed


@pytest.fixture
def busy_port() -> tuple[str, socket.socket]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return f"127.0.0.1:{holder.getsockname()[1]}", holder


def test_a_failed_start_removes_only_the_data_dir_it_created(
    tmp_path: Path, busy_port: tuple[str, socket.socket]
) -> None:
    address, holder = busy_port
    try:
        created = tmp_path / "new" / "nested" / "data"
        one_line(*serve(created, http=address), "http.listen", address)
        assert not (tmp_path / "new").exists()
        existing = tmp_path / "existing"
        existing.mkdir()
        (existing / "keep.txt").write_text("mine")
        one_line(*serve(existing, http=address), "http.listen")
        assert (existing / "keep.txt").read_text() == "mine"
        assert existing.is_dir()
    finally:
        holder.close()
