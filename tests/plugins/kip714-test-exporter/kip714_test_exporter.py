"""A minimal third-party kip714 exporter, used by kip714's tests.

It is deliberately written the way docs/exporters.md tells plugin authors to
write one: it imports only ``exporters.api``, keeps its constructor free of
side effects, does its blocking file I/O in ``asyncio.to_thread`` and refuses
unknown options with ``TypeError``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from exporters.api import LoggedPush

__all__ = ["RecorderExporter"]


class RecorderExporter:
    """Appends ``{"offset": ..., "client_instance_id": ...}`` per push to ``path``."""

    def __init__(self, config: Mapping[str, Any], /) -> None:
        unknown = sorted(set(config) - {"path"})
        if unknown:
            raise TypeError(f"unknown option {unknown[0]!r} for test-recorder")
        if not isinstance(config.get("path"), str):
            raise ValueError(f"option 'path' must be a string: {config.get('path')!r}")
        self._path = Path(config["path"])
        self._file: IO[str] | None = None

    async def start(self) -> None:
        self._file = await asyncio.to_thread(self._path.open, "a", encoding="utf-8")

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        if self._file is None:
            raise RuntimeError("export() before start()")
        lines = "".join(
            json.dumps({"offset": p.offset, "client_instance_id": p.client_instance_id}) + "\n"
            for p in batch
        )
        await asyncio.to_thread(self._file.write, lines)

    async def flush(self) -> None:
        if self._file is not None:
            await asyncio.to_thread(self._file.flush)

    async def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            await asyncio.to_thread(file.close)
