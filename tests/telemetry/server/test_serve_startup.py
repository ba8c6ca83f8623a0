"""``kip714 serve`` at start: every refusal is one line and exit 2; the README's config works."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from telemetry.server.config import load_settings
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"


def serve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "telemetry", "serve", "--log-format", "json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        # The checkout under test, not whichever copy is installed.
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The whole output of a refused start: exit 2, one line on stderr, nothing else."""
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kip714: ")
    return lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("listener", ["kafka", "http"])
def test_a_port_in_use_names_the_listener_and_the_address(
    tmp_path: Path, taken_port: int, listener: str
) -> None:
    flags = {"kafka": "127.0.0.1:0", "http": "127.0.0.1:0", listener: f"127.0.0.1:{taken_port}"}
    listen = ["--kafka-listen", flags["kafka"], "--http-listen", flags["http"]]
    line = one_line(serve(*listen, "--data-dir", str(tmp_path / "data"), cwd=tmp_path))
    assert f"the {listener} listener ({listener}.listen)" in line
    assert f"127.0.0.1:{taken_port}" in line
    assert "in use" in line


def test_an_unknown_log_level_is_one_line(tmp_path: Path) -> None:
    line = one_line(serve("--log-level", "LOUD", "--data-dir", str(tmp_path / "d"), cwd=tmp_path))
    assert line.startswith("kip714: config error: --log-level: invalid value 'LOUD'")
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("flags", "config"),
    [
        (["--kafka-listen", "0.0.0.0:0"], None),
        (["--kafka-listen", "[::]:0"], None),
        (["--kafka-listen", "127.0.0.1:0"], '[kafka]\nadvertised = "0.0.0.0:9092"\n'),
    ],
)
def test_an_unspecified_advertised_address_is_refused(
    tmp_path: Path, flags: list[str], config: str | None
) -> None:
    extra: list[str] = []
    if config is not None:
        (tmp_path / "c.toml").write_text(config)
        extra = ["--config", str(tmp_path / "c.toml")]
    line = one_line(
        serve(*flags, "--http-listen", "127.0.0.1:0", "--data-dir", "d", *extra, cwd=tmp_path)
    )
    assert line.startswith("kip714: config error: kafka.advertised: ")


def test_a_bad_exporter_option_logs_nothing_before_its_line(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("[exporters.landing.options]\ncolour = 1\n")
    listen = ["--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"]
    line = one_line(serve("--config", "c.toml", *listen, "--data-dir", "d", cwd=tmp_path))
    assert line.startswith("kip714: config error: exporters.landing.options")
    assert "colour" in line


def readme_config() -> str:
    text = README.read_text()
    section = text[text.index("## Configuration") :]
    match = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_readme_config_loads_as_pasted(tmp_path: Path) -> None:
    path = tmp_path / "kip714.toml"
    path.write_text(readme_config())
    settings = load_settings(path)
    assert settings.kafka.advertised_host is None  # the bound address, which clients can reach
    exporters = {e.name: e for e in settings.exporters}
    # A relative data_dir in a file is relative to the file's directory.
    assert exporters["landing"].options["path"] == str(tmp_path / "kip714-data")
    assert exporters["debug"].options["path"] == str(tmp_path / "kip714-data/jsonl/debug.jsonl")
    moved = load_settings(path, data_dir=tmp_path / "elsewhere")
    assert moved.log_dir == tmp_path / "elsewhere" / "log"
    # otlp and prometheus write no files, so they get no path.
    assert {e.name: e.options["path"] for e in moved.exporters if "path" in e.options} == {
        "landing": str(tmp_path / "elsewhere"),
        "debug": str(tmp_path / "elsewhere" / "jsonl" / "debug.jsonl"),
    }


def test_serve_runs_the_readme_config_and_names_every_path(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServeProcess(data, readme_config()).start()
    try:
        (line,) = [e["event"] for e in server.events() if "kip714 serving" in e.get("event", "")]
        assert f"log_dir={data / 'log'}" in line
        assert f"landing(iceberg {data})" in line
        assert f"debug(jsonl {data / 'jsonl' / 'debug.jsonl'})" in line
        assert server.stop() == 0
    finally:
        server.kill()
    assert (data / "log" / "log_id").exists()
    assert (data / "lake" / "catalog.db").is_file()  # the default lake, tables created at start
    assert (data / "lake" / "warehouse" / "kip714" / "metrics" / "metadata").is_dir()
    assert (data / "node_id").is_file()
    assert (data / "jsonl" / "debug.jsonl").exists()


def test_the_retired_parquet_landing_is_refused_with_the_way_to_move(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('[exporters.landing]\ntype = "parquet"\n')
    listen = ["--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"]
    line = one_line(serve("--config", "c.toml", *listen, "--data-dir", "d", cwd=tmp_path))
    assert "'parquet' is retired" in line
    assert "kip714 lake import-parquet" in line
    assert not (tmp_path / "d" / "metrics").exists()
