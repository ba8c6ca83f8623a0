"""What every ``kip714`` command that reads a server's state shares: one grammar, one help style.

``--config FILE`` and ``--data-dir DIR`` are accepted before and after a
command's verb (``kip714 lake --data-dir D tables`` is ``kip714 lake tables
--data-dir D``): an operator types them where habit puts them, and a
refusal over their position teaches nothing. Both are added with
``argparse.SUPPRESS`` defaults to the command's parser and to each verb's,
so a value given after the verb wins over one given before it and an
absent one leaves no attribute (``location_of`` then applies the server's
defaults).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["HelpFormatter", "add_location", "location_of"]

CONFIG_HELP = "the server's TOML configuration (default: none, the embedded defaults)"
DATA_DIR_HELP = (
    "the server's data directory (default: the config's data_dir, else ./kip714-data; "
    "relative to the working directory)"
)


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default in its help (unless the help already names it)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or default == []
            or action.option_strings == []
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def add_location(
    parsers: Iterable[argparse.ArgumentParser], *, config_help: str = CONFIG_HELP
) -> None:
    """``--config`` and ``--data-dir`` on the command's parser and on each verb's."""
    for parser in parsers:
        parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=config_help)
        parser.add_argument(
            "--data-dir", metavar="DIR", default=argparse.SUPPRESS, help=DATA_DIR_HELP
        )


def location_of(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``(config, data_dir)`` as given, before or after the verb; ``None`` where not given."""
    config = getattr(args, "config", None)
    data_dir = getattr(args, "data_dir", None)
    return config, data_dir
