"""The ``prometheus`` exporter: client series served for scraping on their own listener.

An exporter cannot add routes to kip714's HTTP listener, so it serves
``GET /metrics`` on ``listen`` itself (aiohttp, started in ``start``). Each
push updates the series in memory and is then committed: the exporter
keeps nothing durable, and after a restart the series are rebuilt from
the pushes that follow (counters restart from zero, which Prometheus reads
as a counter reset).

Options (``[exporters.NAME.options]``):
    listen: ``HOST:PORT`` to serve on (default ``127.0.0.1:9464``; port 0
        picks a free port, logged and in ``address``).
    max_series: The most series kept (default 100000); points that would
        start more are dropped and counted (``dropped_points``).
    max_label_value_bytes: A longer label value is truncated to it (default
        1024; ``truncated_label_values``); a label name longer is dropped.
    max_labels_per_series: The identity labels, then attributes in
        label-name order, up to this many (default 64, at least 6); the rest
        are dropped and counted (``dropped_labels``).
    max_bytes: The accounted bytes of every series kept, their scrape text
        and memory (default 256 MiB); points that would take more are dropped
        and counted (``dropped_points_max_bytes``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, final

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from exporters.prometheus.collector import SeriesCollector
from exporters.prometheus.series import SeriesStats, SeriesStore
from exporters.prometheus.settings import PrometheusSettings

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from exporters.api import LoggedPush

__all__ = ["PrometheusExporter"]

_log = logging.getLogger(__name__)


@final
class PrometheusExporter:
    """Keeps the latest value of every client series and serves them (module docstring).

    Raises (at construction):
        TypeError: An unknown option.
        ValueError: An option with an invalid value.
    """

    def __init__(self, config: Mapping[str, Any], /) -> None:
        self.settings = PrometheusSettings.from_options(config)
        self._store = SeriesStore(self.settings.limits)
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(SeriesCollector(self._store))
        self._runner: web.AppRunner | None = None
        self._address: tuple[str, int] | None = None
        self._closed = False

    @property
    def stats(self) -> SeriesStats:
        """Pushes, live series and what was dropped, expired or not translated."""
        return self._store.stats

    @property
    def address(self) -> tuple[str, int] | None:
        """The bound host and port once started (the real port when ``listen`` asked for 0)."""
        return self._address

    async def start(self) -> None:
        if self._closed:
            raise RuntimeError("prometheus exporter is closed")
        if self._runner is not None:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._scrape)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.settings.host, self.settings.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._address = (str(host), int(port))
        _log.info("prometheus exporter serving http://%s:%d/metrics", host, port)

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        """Update the series from ``batch`` (decoded in a worker thread)."""
        if self._runner is None:
            raise RuntimeError("prometheus exporter used before start() or after close()")
        await asyncio.to_thread(self._store.apply, tuple(batch))

    async def flush(self) -> None:
        """Nothing to do: every exported push is already visible to the next scrape."""

    async def close(self) -> None:
        """Stop serving; idempotent."""
        self._closed = True
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _scrape(self, _request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, self._registry)
        response = web.Response(body=body)
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response
