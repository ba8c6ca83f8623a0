"""What every rollup shares: window parsing, the client key, the prepared projection.

Rollups group by metric and client (``client_id``, ``client_instance_id``,
software name and version) and, where the data point carries it, the broker
the metric describes: the landing's ``node_id`` column, which the landing
decodes from whichever attribute the client used (librdkafka ``node.id``, the
Java client ``node_id``), so no rollup reads the attribute map for it.
"""

from __future__ import annotations

import re
from datetime import timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

__all__ = [
    "CLIENT_COLUMNS",
    "KEY_COLUMNS",
    "parse_window",
    "prepare_points",
    "series_attributes",
    "window_bounds",
    "window_column",
    "window_label",
]

CLIENT_COLUMNS: tuple[str, ...] = (
    "client_id",
    "client_instance_id",
    "client_software_name",
    "client_software_version",
)
"""One client, as the broker (not the payload) identified it."""

KEY_COLUMNS: tuple[str, ...] = ("metric_name", *CLIENT_COLUMNS, "node_id")
"""The grouping key of the gauge, sum and histogram rollups (after the window)."""

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


def series_attributes(attributes: str = "attributes") -> Column:
    """A map's entries in key order: a groupable stand-in for the map (maps cannot be keys)."""
    return sf.array_sort(sf.map_entries(sf.coalesce(sf.col(attributes), sf.create_map())))


PREPARED_MARKER = "_series"
#: What every prepared point carries: time, the series keys and its temporality.
PREPARED_POINT_COLUMNS = (
    "time",
    "start_time",
    "metric_name",
    "client_id",
    "client_instance_id",
    "client_software_name",
    "client_software_version",
    "node_id",
    PREPARED_MARKER,
    "temporality",
)
"""Column that only ``prepare_points`` adds: its presence means "already prepared"."""


def prepare_points(points: DataFrame) -> DataFrame:
    """The landing rows narrowed to what the rollups read.

    Why: reading the wide landing row was repeated by every rollup; the job
    now prepares the landing once, persists the result and feeds it to all
    rollups of a run. The attribute map survives only as ``_series`` (its
    sorted entries), and only on cumulative points, the only ones that need
    their exact series. Idempotent: a prepared frame is returned as it is, so
    every rollup can call it on landing rows or on the job's prepared frame.
    """
    if PREPARED_MARKER in points.columns:
        return points
    cumulative = sf.col("temporality") == "cumulative"
    return points.select(
        "time",
        "start_time",
        "metric_name",
        "metric_type",
        *CLIENT_COLUMNS,
        "node_id",
        "temporality",
        "is_monotonic",
        "push_offset",
        "value",
        "count",
        "sum",
        "min",
        "max",
        "bucket_counts",
        "explicit_bounds",
        sf.when(cumulative, series_attributes()).alias(PREPARED_MARKER),
    )


def window_column(seconds: int, time: str = "time") -> Column:
    """The tumbling window of ``time``, aligned to the epoch (so to UTC hours and days).

    ``sf.window`` rather than arithmetic on the timestamp because Structured
    Streaming only evicts state for keys it knows to be event-time windows;
    batch and incremental then share one definition. Group by it, then
    ``window_bounds`` turns it into ``window_start``/``window_end``.
    """
    return sf.window(sf.col(time), f"{seconds} seconds").alias("window")


def window_bounds() -> list[Column]:
    """``window_start``, ``window_end`` from a grouped ``window`` struct."""
    return [sf.col("window.start").alias("window_start"), sf.col("window.end").alias("window_end")]
