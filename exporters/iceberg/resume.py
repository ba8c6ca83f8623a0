"""Where a Parquet landing in the same data directory stopped, so a switch lands nothing twice.

A data directory that held the ``parquet`` landing keeps its published files
(``kip714 lake import-parquet`` appends them to the table). The Iceberg
landing that replaces it starts after the newest Parquet publication of the
same ingest log: the host's committed position for the exporter may lag
behind it (SIGKILL between a publication and the host's commit), and those
offsets are in Parquet already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporters.parquet.publish import read_manifests

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["parquet_landing_position"]


def parquet_landing_position(data_dir: Path, log_id: str) -> int:
    """One past the last offset of ``log_id`` the Parquet landing under ``data_dir`` published."""
    ends = [m.last_offset for m in read_manifests(data_dir) if m.log_id == log_id]
    return max(ends, default=-1) + 1
