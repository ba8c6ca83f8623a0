"""Exporter plugins: the interface kip714 feeds logged pushes through, and the built-ins."""

from __future__ import annotations

__all__: list[str] = []
