"""Relative paths in a config file are relative to the file's directory (issue 36)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

from telemetry.server.config import load_settings

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = """
data_dir = "data"
[lake]
warehouse = "lake/wh"
catalog = { type = "sql", uri = "sqlite:///lake/catalog.db" }
[kafka.tls]
certfile = "tls/server.pem"
keyfile = "tls/server.key"
[exporters.lines]
type = "jsonl"
[exporters.lines.options]
path = "out/lines.jsonl"
[exporters.elsewhere]
type = "jsonl"
[exporters.elsewhere.options]
path = "/srv/absolute.jsonl"
"""


def test_every_relative_path_in_the_file_is_relative_to_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "tls").mkdir(parents=True)
    (conf / "tls" / "server.pem").write_text("")
    (conf / "tls" / "server.key").write_text("")
    (conf / "k.toml").write_text(CONFIG)
    work = tmp_path / "work"
    work.mkdir()
    here = os.getcwd()
    os.chdir(work)  # the file's directory, not this one, anchors its paths
    try:
        settings = load_settings("../conf/k.toml")
        flagged = load_settings("../conf/k.toml", data_dir="mine")
    finally:
        os.chdir(here)
    assert settings.data_dir == conf / "data"
    exporters = {e.name: e.options for e in settings.exporters}
    assert exporters["lines"]["path"] == str(conf / "out" / "lines.jsonl")
    assert exporters["elsewhere"]["path"] == "/srv/absolute.jsonl"
    assert exporters["landing"]["warehouse"] == str(conf / "lake" / "wh")
    assert exporters["landing"]["catalog"]["uri"] == f"sqlite:///{conf}/lake/catalog.db"
    assert settings.security.kafka_tls is not None
    assert settings.security.kafka_tls.certfile == conf / "tls" / "server.pem"
    # A path on the command line stays relative to the working directory.
    assert str(flagged.data_dir) == "mine"
    assert flagged.former_data_dir is None


def test_a_data_dir_that_moved_away_from_its_log_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "k.toml").write_text('data_dir = "data"\n')
    work = tmp_path / "work"
    (work / "data" / "log").mkdir(parents=True)  # where the old rule put the ingest log
    done = subprocess.run(
        [sys.executable, "-m", "telemetry", "serve", "--config", "../conf/k.toml",
         "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"],
        cwd=work,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert str(conf / "data") in line
    assert str(work / "data") in line
    assert not (conf / "data").exists()  # nothing started there
