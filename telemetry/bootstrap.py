"""The composition root: settings in, a running server out.

The only module that knows every part: it opens the ingest log, builds the
telemetry manager from the configured subscriptions, loads the exporters
through their entry points, starts a host per exporter, then the Kafka and
HTTP listeners. Shutdown runs the other way round, so nothing is accepted
that cannot be logged, and nothing logged is abandoned by an exporter
without its position being committed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from exporters import registry as exporter_registry
from telemetry.config import ExporterSettings, Settings, load_settings
from telemetry.errors import ConfigError
from telemetry.exporter_host import ExporterHost
from telemetry.http_app import create_app
from telemetry.ingest import IngestLog
from telemetry.kafka_listener import KafkaListener, wall_clock_ms
from telemetry.manager import TelemetryManager
from telemetry.self_metrics import ServerCollector, make_registry
from telemetry.subscriptions import SubscriptionRegistry

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from exporters.api import Exporter
    from telemetry.subscriptions import Subscription

_log = logging.getLogger(__name__)

#: How often idle client instances are swept out of the cache.
EXPIRY_SWEEP_S = 1.0


def create_exporter(settings: ExporterSettings) -> Exporter:
    """Load the plugin through its entry point; a bad name or option is a ``ConfigError``."""
    key = f"exporters.{settings.name}"
    try:
        return exporter_registry.create(settings.name, settings.type, settings.options)
    except exporter_registry.ExporterNotFoundError as error:
        raise ConfigError(f"{key}.type", settings.type, str(error)) from None
    except exporter_registry.RegistryError as error:
        raise ConfigError(f"{key}.options", dict(settings.options), str(error)) from None


def subscription_registry(subscriptions: Iterable[Subscription]) -> SubscriptionRegistry:
    registry = SubscriptionRegistry()
    for subscription in subscriptions:
        registry.put(subscription)
    return registry


class Server:
    """kip714 as one object: ``await start()``, then ``await stop()``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.manager = TelemetryManager(
            settings.telemetry, subscriptions=subscription_registry(settings.subscriptions)
        )
        self.log: IngestLog | None = None
        self.listener: KafkaListener | None = None
        self.hosts: list[ExporterHost] = []
        self._runner: web.AppRunner | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.http_address: tuple[str, int] | None = None
        self.stopping = False
        #: Failures of the log or an exporter seen while running (sticky): exit status 1.
        self.failures: dict[str, str] = {}

    async def start(self) -> None:
        settings = self.settings
        # Build every exporter before touching the disk: a typo fails fast.
        exporters = [(entry, create_exporter(entry)) for entry in settings.exporters]
        self.log = await IngestLog.open(settings.log_dir, settings.log)
        for exporter_settings, exporter in exporters:
            host = ExporterHost(exporter_settings, exporter, self.log)
            self.hosts.append(host)
            await host.start()
        await self._unregister_removed_exporters()
        self.listener = KafkaListener(settings.kafka, self.manager, self.log)
        kafka_address = await self.listener.start()
        collector = ServerCollector(
            self.manager, self.listener, self.log, self.hosts, readiness=self.readiness
        )
        registry = make_registry(collector)
        self._runner = web.AppRunner(
            create_app(registry, self.health, self.readiness), access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, settings.http_host, settings.http_port)
        await site.start()
        http = self._runner.addresses[0]
        self.http_address = (str(http[0]), int(http[1]))
        self._sweeper = asyncio.create_task(self._sweep_expired(), name="instance-expiry")
        _log.info(
            "kip714 serving: kafka=%s:%d advertised=%s:%d http=%s:%d data_dir=%s exporters=%s",
            *kafka_address,
            *self.listener.advertised_address,
            *self.http_address,
            settings.data_dir,
            ",".join(f"{h.name}({h.settings.type})" for h in self.hosts) or "none",
        )

    async def stop(self) -> None:
        """Stop accepting, finish in-flight pushes, drain and close exporters, close the log.

        Every step runs even if an earlier one raised or was cancelled (each
        is bounded), so one stuck exporter cannot keep the others from
        committing nor the log from closing; a cancellation of ``stop`` is
        re-raised once all of them are done.
        """
        self.stopping = True
        self._note_failures()
        cancelled: asyncio.CancelledError | None = None
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("instance expiry", self._stop_sweeper)
        ]
        if self.listener is not None:
            steps.append(("kafka listener", self.listener.close))
        if self._runner is not None:
            steps.append(("http listener", self._runner.cleanup))
        steps += [(f"exporter {host.name}", host.stop) for host in self.hosts]
        if self.log is not None:
            steps.append(("ingest log", self.log.close))
        for name, step in steps:
            try:
                await step()
            except asyncio.CancelledError as error:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # stop() itself is being cancelled: finish the (bounded) steps first.
                    _log.warning("stopping: cancelled during %s; finishing the other steps", name)
                    cancelled = error
                else:  # a step raised CancelledError of its own: a failure of that step
                    _log.error("stopping: %s was cancelled; carrying on with the rest", name)
            except Exception:
                _log.exception("stopping: %s failed; carrying on with the rest", name)
        self._note_failures()
        _log.info("kip714 stopped")
        if cancelled is not None:
            raise cancelled

    async def _stop_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            # wait(), not `await task` under suppress(CancelledError): that would
            # also swallow a cancellation of stop() itself.
            await asyncio.wait({self._sweeper})

    def _note_failures(self) -> None:
        """Remember failures of the log and of exporters: they decide the exit status."""
        if self.log is not None and self.log.failure is not None:
            self.failures.setdefault("ingest log", f"ingest log failed: {self.log.failure}")
        for host in self.hosts:
            if host.failure is not None:
                self.failures.setdefault(f"exporter {host.name}", host.failure)

    def readiness(self) -> list[str]:
        """Why the server should not get traffic now; empty when it is ready."""
        reasons: list[str] = []
        if self.stopping:
            reasons.append("the server is stopping")
        log = self.log
        if log is None or self.listener is None:
            reasons.append("the server is starting")
        elif log.failure is not None:
            reasons.append(f"the ingest log cannot append: it failed: {log.failure}")
        elif log.full:
            reasons.append(f"the ingest log cannot append: {log.stats.last_refusal_reason}")
        for host in self.hosts:
            problem = host.problem()
            if problem is not None:
                reasons.append(problem)
        self._note_failures()
        return reasons

    def reload_subscriptions(self) -> None:
        """SIGHUP: re-read the subscriptions; clients see them on their next request."""
        if self.settings.config_path is None:
            _log.info("SIGHUP ignored: the server runs on embedded defaults, no file to re-read")
            return
        try:
            fresh = load_settings(self.settings.config_path)
        except Exception as error:
            _log.error("SIGHUP: keeping the current subscriptions: %s", error)
            return
        current = self.manager.subscriptions
        wanted = {subscription.name for subscription in fresh.subscriptions}
        for name in [s.name for s in current if s.name not in wanted]:
            current.update(name, {})
        for subscription in fresh.subscriptions:
            current.put(subscription)
        _log.info("SIGHUP: subscriptions reloaded: %s", ", ".join(sorted(wanted)))

    def health(self) -> dict[str, object]:
        """Liveness with the details: answered while the process runs."""
        log = self.log
        reasons = self.readiness()
        return {
            "ok": not reasons,
            "reasons": reasons,
            "log_full": bool(log and log.full),
            "log_failed": bool(log and log.failure is not None),
            "client_instances": self.manager.instance_count,
            "exporter_lag": {host.name: host.lag for host in self.hosts},
        }

    async def _unregister_removed_exporters(self) -> None:
        """An exporter gone from the config must not hold back log retention forever."""
        assert self.log is not None
        configured = {host.consumer for host in self.hosts}
        for consumer in self.log.consumers():
            if consumer.startswith("exporter:") and consumer not in configured:
                _log.info("forgetting the position of removed exporter %s", consumer)
                await self.log.unregister(consumer)

    async def _sweep_expired(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_SWEEP_S)
            self.manager.expire(wall_clock_ms())
