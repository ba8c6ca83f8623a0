"""PySpark rollups over the Parquet landing; reads nothing but Parquet."""

from __future__ import annotations

__all__: list[str] = []
