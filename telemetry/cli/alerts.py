"""``kip714 alerts prometheus``: the health rules as a Prometheus rule file.

The rules come from ``--rules FILE``, else the ``[alerts] rules`` of
``--config FILE`` (relative to that file, as the server reads it), else
the shipped ``health_rules/rules.toml``. Only ``tomllib``-level work: the
server is not imported.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from health_rules import RulesError, load_rules
from health_rules.promql import render
from telemetry.cli.common import HelpFormatter, location_of
from telemetry.cli.rollup_args import RollupConfigError, config_document

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["build_parser", "main"]

RULES_CONFIG_HELP = "the server's TOML configuration, for its [alerts] rules (default: none)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip714 alerts",
        description="The client health rules (health_rules/rules.toml, or the config's "
        "[alerts] rules) as alerts for other systems.",
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    prometheus = commands.add_parser(
        "prometheus",
        help="every rule as a Prometheus alerting rule (YAML) over the prometheus exporter's "
        "series",
        description="Print (or write with --out) a Prometheus rule file; check it with "
        "promtool check rules.",
        formatter_class=HelpFormatter,
    )
    prometheus.add_argument(
        "--rules", metavar="FILE", help="a rules file (default: the config's, else the shipped one)"
    )
    prometheus.add_argument(
        "--out", metavar="FILE", help="write the YAML here (default: standard output)"
    )
    for accepting in (parser, prometheus):  # before or after the verb, as every command
        accepting.add_argument(
            "--config", metavar="FILE", default=argparse.SUPPRESS, help=RULES_CONFIG_HELP
        )
    return parser


def _rules_path(config: str | None, rules: str | None) -> Path | None:
    if rules is not None:
        return Path(rules)
    if config is None:
        return None
    try:
        alerts = config_document(config).get("alerts", {})
    except RollupConfigError as error:
        raise RulesError(f"cannot read the config: {error}") from None
    chosen = alerts.get("rules") if isinstance(alerts, dict) else None
    if chosen is not None and not isinstance(chosen, str):
        raise RulesError(f"{config}: alerts.rules must be a path (a string)")
    return Path(chosen) if chosen else None


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    config, _ = location_of(args)
    try:
        rules = load_rules(_rules_path(config, args.rules))
    except RulesError as error:
        print(f"kip714 alerts: error: {error}", file=sys.stderr)
        return 2
    text = render(rules)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    temporary = out.with_name(out.name + ".tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, out)  # Prometheus reloading the file never reads half of it
    except OSError as error:
        print(f"kip714 alerts: error: cannot write {out}: {error}", file=sys.stderr)
        return 2
    return 0
