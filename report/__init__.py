"""``kip714 report``: a self-contained HTML health report from the rollup tables.

A package of its own that reads only the lake (like ``spark_jobs``), so the
command works on any copy of a data directory and imports nothing of the
server or the exporters.
"""

from __future__ import annotations

from report.cli import main, write_report
from report.lake import read_rollup

__all__ = ["main", "read_rollup", "write_report"]
