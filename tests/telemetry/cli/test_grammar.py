"""One grammar for every ``kip714`` subcommand (issue 36): a table every new command must join.

Each row says which of ``--config`` and ``--data-dir`` the command takes and
a verb to try them on; the tests check that ``kip714 --help`` lists exactly
the table's commands, that both options are accepted before and after the
verb with the same meaning, and that every ``--help`` (each verb's too)
shows its defaults and no markup.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import TYPE_CHECKING, NamedTuple

import pytest

from telemetry.cli import alerts, demo, lake, log, main, meta, quota_advice
from telemetry.cli.common import location_of

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


class Command(NamedTuple):
    parser: Callable[[], argparse.ArgumentParser]
    #: Arguments a parse needs beside the two options (a verb, required flags).
    verb: tuple[str, ...]
    config: bool
    data_dir: bool


def _serve() -> argparse.ArgumentParser:
    parser = main.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    serve: argparse.ArgumentParser = commands.choices["serve"]
    return serve


def _rollup() -> argparse.ArgumentParser:
    from spark_jobs.job import build_parser  # noqa: PLC0415 - PySpark

    return build_parser()


def _report() -> argparse.ArgumentParser:
    from report.cli import build_parser  # noqa: PLC0415

    return build_parser()


def _admin(kind: str) -> Callable[[], argparse.ArgumentParser]:
    def parser() -> argparse.ArgumentParser:
        from telemetry.admin.cli import _parser  # noqa: PLC0415

        return _parser(kind)

    return parser


COMMANDS: dict[str, Command] = {
    "serve": Command(_serve, (), config=True, data_dir=True),
    "lake": Command(lake.build_parser, ("tables",), config=True, data_dir=True),
    "log": Command(log.build_parser, ("status",), config=True, data_dir=True),
    "meta": Command(meta.build_parser, ("migrate", "--to-kafka"), config=True, data_dir=True),
    "rollup": Command(_rollup, (), config=False, data_dir=True),  # --config: kip714 rollup
    "report": Command(_report, ("--out", "r.html"), config=True, data_dir=True),
    "subscriptions": Command(_admin("subscriptions"), ("--describe",), config=True, data_dir=False),
    "quotas": Command(_admin("quotas"), ("--describe",), config=True, data_dir=False),
    "demo": Command(demo.build_parser, (), config=False, data_dir=True),
    "alerts": Command(alerts.build_parser, ("prometheus",), config=True, data_dir=False),
    # A verb with a parser of its own: `kip714 quotas advise`. Its --config and --data-dir
    # find the lake it reads; --http URL (not --config) names the server --apply changes.
    "quotas advise": Command(quota_advice.build_parser, (), config=True, data_dir=True),
}


def _subcommands() -> set[str]:
    parser = main.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(commands.choices)


def test_the_table_covers_every_subcommand_kip714_help_lists() -> None:
    assert {name for name in COMMANDS if " " not in name} == _subcommands()


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and each verb's."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_help_shows_its_defaults_and_no_markup(name: str) -> None:
    for parser in _parsers(COMMANDS[name].parser()):
        text = parser.format_help()
        for markup in ("``", "::", ":class:", ":func:"):
            assert markup not in text, (parser.prog, markup)
        assert not re.search(r"^\s*\.\. ", text, re.MULTILINE), parser.prog  # RST directives
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            assert action.help, (parser.prog, action.option_strings)
            default = action.default
            if default in (None, False, [], argparse.SUPPRESS) or action.required:
                continue
            helped = parser._get_formatter()._get_help_string(action) or ""
            assert "default" in helped, (parser.prog, action.option_strings)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_config_and_data_dir_before_and_after_the_verb(name: str, tmp_path: Path) -> None:
    command = COMMANDS[name]
    options: list[str] = []
    if command.config:
        options += ["--config", str(tmp_path / "k.toml")]
    if command.data_dir:
        options += ["--data-dir", str(tmp_path / "d")]
    verb = list(command.verb)
    before = command.parser().parse_args([*options, *verb])
    after = command.parser().parse_args([*verb, *options])
    config, data_dir = location_of(after)
    assert location_of(before) == (config, data_dir)
    if command.config:
        assert config == str(tmp_path / "k.toml")
    if command.data_dir:
        assert str(data_dir) == str(tmp_path / "d")


def test_log_and_report_default_to_the_server_s_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main.main(["log", "status"]) == 2
        assert "kip714-data/log" in capsys.readouterr().err
        assert main.main(["report", "--out", "r.html"]) == 2
        assert "no data directory kip714-data" in capsys.readouterr().err
        config = tmp_path / "conf" / "k.toml"
        config.parent.mkdir()
        config.write_text('data_dir = "here"\n')
        assert main.main(["report", "--out", "r.html", "--config", str(config)]) == 2
        assert f"no data directory {tmp_path}/conf/here" in capsys.readouterr().err
    finally:
        os.chdir(here)


async def test_subscriptions_finds_the_server_and_its_token_through_config(
    tmp_path: Path,
) -> None:
    import asyncio  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from tests.telemetry.server_support import running  # noqa: PLC0415

    token = "grammar-token"
    async with running(tmp_path, f'[admin]\ntoken = "{token}"\n') as server:
        assert server.http_address is not None
        host, port = server.http_address
        config = tmp_path / "client.toml"
        config.write_text(f'[http]\nlisten = "{host}:{port}"\n[admin]\ntoken = "{token}"\n')
        env = {k: v for k, v in os.environ.items() if k != "KIP714_ADMIN_TOKEN"}
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "telemetry", "subscriptions", "--config", str(config),
             "--describe", "--name", "default", "--all"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "org.apache.kafka." in done.stdout
        config.write_text(f'[http]\nlisten = "{host}:{port}"\n[admin]\ntoken = "wrong"\n')
        refused = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "telemetry", "subscriptions", "--config", str(config),
             "--alter", "--name", "default", "--add-config", "interval.ms=5000"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )  # fmt: skip
        assert refused.returncode != 0, refused.stderr  # the file's token is the one sent
        assert "HTTP 401" in refused.stderr
