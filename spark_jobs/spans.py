"""Time ranges and window names, without Spark.

The pre-flight (``job.plan``, ``metadata``) decides a run from the lake's
metadata before any JVM starts, and must not pay for importing PySpark:
what it shares with the Spark side lives here, standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta

__all__ = ["Range", "merge_ranges", "parse_window", "window_label"]

Range = tuple[datetime, datetime]
"""``[start, end)`` in UTC."""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_WINDOW = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_DAY_S = 86400


def parse_window(window: str | timedelta) -> int:
    """Window length in seconds from ``"1m"``, ``"15m"``, ``"1h"``, ``"1d"`` or a timedelta.

    A window must divide a day evenly: windows then align with UTC hours and
    days, so every output ``date/hour`` partition holds whole windows and a
    rerun can replace it without touching its neighbours.

    Raises:
        ValueError: unparsable, not positive, or not a divisor of a day.
    """
    if isinstance(window, timedelta):
        seconds = window.total_seconds()
        if seconds != int(seconds):
            raise ValueError(f"window {window} is not a whole number of seconds")
        result = int(seconds)
    else:
        match = _WINDOW.match(window)
        if match is None:
            raise ValueError(f"window {window!r}: expected a number and a unit s, m, h or d")
        result = int(match[1]) * _UNITS[match[2]]
    if result <= 0 or _DAY_S % result != 0:
        raise ValueError(f"window {window!s}: must be positive and divide one day evenly")
    return result


def window_label(window: str | timedelta) -> str:
    """The shortest name of a window (``3600`` s → ``"1h"``), used in output names."""
    seconds = parse_window(window)
    for unit in ("d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


def merge_ranges(ranges: Iterable[Range]) -> list[Range]:
    """Sorted ranges with overlapping or touching ones joined."""
    merged: list[Range] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
