"""A data directory as the retired ``parquet`` exporter left it, for the import and switch tests.

Its layout, as that exporter published it:
``metrics/date=YYYY-MM-DD/hour=HH/part-<first>-<last>-w0.parquet`` (the
landing rows, times in µs) and one JSON manifest per publication under
``_landing/manifests/``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from exporters.iceberg.import_parquet import parquet_metrics_schema
from exporters.landing.flatten import flatten_to_table

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from exporters.api import LoggedPush


def publish_old(data_dir: Path, pushes: Sequence[LoggedPush], log_id: str | None = None) -> int:
    """Publish ``pushes`` (one generation) as the Parquet landing did; returns the rows written."""
    table, _, _ = flatten_to_table(pushes)
    table = table.cast(parquet_metrics_schema())
    first, last = pushes[0].offset, pushes[-1].offset
    stamp = dt.datetime.fromtimestamp(pushes[0].received_time_ms / 1000, dt.UTC)
    directory = data_dir / "metrics" / f"date={stamp:%Y-%m-%d}" / f"hour={stamp:%H}"
    directory.mkdir(parents=True, exist_ok=True)
    name = f"part-{first:020d}-{last:020d}-w0.parquet"
    pq.write_table(table, directory / name)
    manifests = data_dir / "_landing" / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    final = str((directory / name).relative_to(data_dir))
    body = {
        "version": 2,
        "log_id": log_id,
        "epoch": 0,
        "first_offset": first,
        "last_offset": last,
        "files": [{"staged": name + ".tmp", "final": final, "rows": table.num_rows, "size": 0}],
    }
    (manifests / f"e000000-{last + 1:020d}.json").write_text(json.dumps(body))
    rows: int = table.num_rows
    return rows
