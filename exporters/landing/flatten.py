"""Logged pushes to one Arrow table of landing rows, never raising for bad data.

``exporters.otlp_rows`` defines the rows; this module turns them into a
``metrics_schema()`` table. Flattening itself never raises; if building the
Arrow table fails for a batch (a value Arrow refuses, which no known input
produces), the batch is converted push by push, and a push that still fails
is reported as unlandable (its offset is logged and counted) instead of
stopping the landing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow as pa

from exporters.landing.fast import flatten_fast
from exporters.landing.schema import metrics_schema, metrics_table
from exporters.otlp_rows import FlattenStats, flatten_batch

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exporters.api import LoggedPush

__all__ = ["flatten_to_table", "reference_table"]

_log = logging.getLogger(__name__)


def flatten_to_table(
    pushes: Sequence[LoggedPush], *, by_kind: bool = False
) -> tuple[pa.Table, FlattenStats, list[int]]:
    """Flatten ``pushes`` (in order) into one table; returns (table, stats, unlandable offsets).

    The vectorised path (``fast.py``) takes the pushes it can; the reference
    flattener takes the rest, and the rows are put back in log order. The
    columns are ``metrics_schema()``'s, those of ``schema.ENCODED_COLUMNS``
    as dictionaries when the vectorised path ran (``schema.decoded`` makes
    them plain; the values are the same). With ``by_kind`` the rows the
    vectorised path gives come grouped by metric type (gauges, sums,
    histograms), each kind's in log order, for a writer that puts each kind
    in its own file: cutting such a table by kind copies nothing.
    """
    try:
        fast = flatten_fast(pushes, by_kind=by_kind)
    except Exception:
        # A bug or an input the vectorised path did not foresee must not stop
        # the landing: the reference flattener never raises for bad data.
        _log.exception("vectorised flattening failed; using the reference flattener")
        fast = None
    if fast is None:
        return reference_table(pushes)
    table, stats, left_out = fast
    if not left_out:
        return table, stats, []
    others, more, unlandable = reference_table([pushes[i] for i in left_out])
    others = others.cast(table.schema)  # the fast path's dictionary columns
    stats.merge(more)
    # Offsets increase in log order and the sort is stable: each push's rows keep their order.
    merged = pa.concat_tables([table, others]).sort_by([("push_offset", "ascending")])
    return merged, stats, unlandable


def reference_table(pushes: Sequence[LoggedPush]) -> tuple[pa.Table, FlattenStats, list[int]]:
    """``flatten_to_table`` through ``otlp_rows`` only (the reference the fast path must match)."""
    columns, stats = flatten_batch(pushes)
    try:
        return metrics_table(columns), stats, []
    except (pa.ArrowException, OverflowError, ValueError, TypeError):
        _log.warning("converting a batch of %d pushes failed; retrying push by push", len(pushes))
    tables: list[pa.Table] = []
    unlandable: list[int] = []
    for push in pushes:
        one, _ = flatten_batch((push,))
        try:
            tables.append(metrics_table(one))
        except (pa.ArrowException, OverflowError, ValueError, TypeError):
            unlandable.append(push.offset)
    table = pa.concat_tables(tables) if tables else metrics_schema().empty_table()
    return table, stats, unlandable
