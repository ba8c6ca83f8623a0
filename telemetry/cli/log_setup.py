"""Log output for the ``kip714`` command: configured here and nowhere else.

Every module logs through ``logging.getLogger(__name__)``; the command renders
those records (ours, aiohttp's, asyncio's) as one JSON object per line for
machines, or as aligned text for a terminal, through structlog's
``ProcessorFormatter``.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "INFO", fmt: str = "auto") -> None:
    """``fmt``: ``json``, ``console``, or ``auto`` (console on a terminal, else JSON)."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=False)
        if use_console
        else structlog.processors.JSONRenderer()
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
