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
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from exporters import registry as exporter_registry
from exporters.iceberg.retention import PeriodicRetention
from telemetry.admin.authorizer import Authorizer
from telemetry.admin.http_routes import add_admin_routes
from telemetry.admin.kafka_handlers import KafkaAdminHandlers
from telemetry.admin.plane import AdminPlane
from telemetry.admin.scram import ScramAdmin
from telemetry.admin.scram_origins import warn_about_unsecured_scram_users
from telemetry.admin.stored import check_stored_state
from telemetry.core.manager import TelemetryManager
from telemetry.core.subscriptions import SubscriptionRegistry
from telemetry.enforcement import Enforcement
from telemetry.enforcement.descriptors import descriptor_limit, fit_to_descriptors
from telemetry.errors import ConfigError
from telemetry.http import HttpIngest, HttpQuotas, add_ingest_routes
from telemetry.http.app import create_app
from telemetry.http.authentication import HttpAuthenticator
from telemetry.http.connections import HttpConnectionGate, HttpConnectionStats
from telemetry.http.forward import ForwardHandler
from telemetry.http.forward_payload import ForwardCollector
from telemetry.http.memory import HttpRequestMemory
from telemetry.http.metrics import HttpConnectionCollector, HttpIngestCollector
from telemetry.http.routes import RUNNER_OPTIONS
from telemetry.http.site import GatedTCPSite
from telemetry.ingress import wall_clock_ms
from telemetry.kafka.authenticator import KafkaSecurity
from telemetry.kafka.listener import KafkaListener
from telemetry.metastore import MetadataStoreError
from telemetry.metastore.opening import open_store, store_location
from telemetry.security.password_checks import PasswordChecks
from telemetry.server import log_choice
from telemetry.server.config import ExporterSettings, Settings, load_settings
from telemetry.server.data_dir_lock import DataDirLock
from telemetry.server.exporter_host import CONSUMER_PREFIX, ExporterHost
from telemetry.server.lake_rollups import lake_rollup_retention
from telemetry.server.public_answers import PublicReasons, metrics_guard
from telemetry.server.self_metrics import BasicAuthCollector, SelfMetrics, ServerCollector
from telemetry.server.startup import (
    StartupError,
    cannot_listen,
    describe_exporter,
    describe_security,
    describe_subscriptions,
    first_missing,
    refuse_a_moved_data_dir,
    tls_context,
    unusable_data_dir,
    warn_about_exposure,
    warn_about_unmatched_kinds,
)
from telemetry.server.stop_steps import run_stop_step

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from exporters.api import Exporter
    from telemetry.core.subscriptions import Subscription
    from telemetry.ingest import IngestLog
    from telemetry.ingest.kafka_log import KafkaPushLog
    from telemetry.ingress import PushLog
    from telemetry.metastore.backend import MetadataBackend
    from telemetry.server.fleet_commits import FleetCommits

_log = logging.getLogger(__name__)

#: How often idle client instances are swept out of the cache.
EXPIRY_SWEEP_S = 1.0
#: The Spark rollups' output, ``<data_dir>/rollups/<name>/date=…/hour=…/`` (docs/rollups.md).
ROLLUPS_DIR = "rollups"


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


def rollup_retention(rollups: Path, retention_hours: int) -> PeriodicRetention:
    """Prunes each rollup ``rollups/<name>/``; ``_checkpoints`` and hidden names are no rollups."""

    def tables() -> list[Path]:
        if not rollups.is_dir():
            return []
        return sorted(
            path
            for path in rollups.iterdir()
            if path.is_dir() and not path.name.startswith(("_", "."))
        )

    return PeriodicRetention("rollups", tables, retention_hours)


class Server:
    """kip714 as one object: ``await start()``, then ``await stop()``."""

    def __init__(self, settings: Settings) -> None:
        # Connections never take the descriptors the log, landing and metastore need.
        settings = replace(settings, limits=fit_to_descriptors(settings.limits, descriptor_limit()))
        self.settings = settings
        #: Who may do what, for every door (Kafka admin, SCRAM, HTTP admin, forward).
        self.authorizer = Authorizer.from_settings(
            settings.admin, http_host=settings.http_host, forward_token=settings.forward.token
        )
        self.manager = TelemetryManager(
            settings.telemetry, subscriptions=subscription_registry(settings.subscriptions)
        )
        self.enforcement = Enforcement(settings.quotas, settings.limits)
        #: The ingest log ``[log] store`` names: local (``log``) or in Kafka (``kafka_log``).
        self.log: IngestLog | None = None
        self.kafka_log: KafkaPushLog | None = None
        self.listener: KafkaListener | None = None
        #: The metadata store applied on top of the file (``telemetry.admin``).
        self.admin: AdminPlane | None = None
        #: What the HTTP listener's admission and timeouts did (also on /metrics).
        self.http_connections: HttpConnectionStats | None = None
        #: The pool every password hash runs on (SASL/PLAIN, HTTP Basic).
        self.password_checks: PasswordChecks | None = None
        #: HTTP Basic on the ingestion routes (its memo is dropped on SIGHUP).
        self.http_authenticator: HttpAuthenticator | None = None
        #: ``/readyz`` shows a reason's first line; a longer text goes to the log once.
        self._public_reasons = PublicReasons()
        self.hosts: list[ExporterHost] = []
        #: With ``[log] store = "kafka"``: the landings' publishers and committer members.
        self.fleets: list[FleetCommits] = []
        self._runner: web.AppRunner | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.http_address: tuple[str, int] | None = None
        self._serving = False
        self._data_dir_lock: DataDirLock | None = None
        self.rollup_retention: PeriodicRetention | None = None
        #: ``[rollups] retention_hours`` on the lake's Iceberg rollup tables.
        self.lake_rollup_retention: PeriodicRetention | None = None
        self.stopping = False
        #: The outermost directory this start created for the data directory
        #: (``None`` when it existed): a failed start removes it, and only it.
        self.created_data_dir: Path | None = None
        #: Failures of the log or an exporter seen while running (sticky): exit status 1.
        self.failures: dict[str, str] = {}

    async def start(self) -> None:
        """Build the exporters, lock the data directory, then open and start the rest.

        Raises:
            DataDirLockedError: Another process owns the data directory;
                nothing was opened.
        """
        settings = self.settings
        # Build every exporter before touching the disk: a typo fails fast.
        exporters = [(entry, create_exporter(entry)) for entry in settings.exporters]
        refuse_a_moved_data_dir(settings)
        self.created_data_dir = first_missing(settings.data_dir)
        try:
            self._data_dir_lock = await asyncio.to_thread(DataDirLock.acquire, settings.data_dir)
        except OSError as error:
            raise StartupError(unusable_data_dir(settings.data_dir, error)) from error
        await self._open_admin_plane()
        push_log = await self._open_log()
        for entry, exporter in exporters:
            await log_choice.start_exporter(
                entry, exporter, self.log, settings.log, self.hosts, self.fleets
            )
        await self._unregister_removed_exporters()
        if settings.rollups_retention_hours is not None:
            self.rollup_retention = rollup_retention(
                settings.data_dir / ROLLUPS_DIR, settings.rollups_retention_hours
            )
            self.rollup_retention.start()
        self.lake_rollup_retention = lake_rollup_retention(settings)
        if self.lake_rollup_retention is not None:
            self.lake_rollup_retention.start()
        assert self.admin is not None
        security = settings.security
        # One metadata store for the server: the admin plane opened it above.
        self.password_checks = PasswordChecks(
            security.password_check_threads, security.password_check_queue
        )
        kafka_security = KafkaSecurity(
            security,
            self.admin.store,
            wall_clock_ms,
            scram_admin=ScramAdmin(
                self.authorizer,
                self.admin.store,
                quotas=self.enforcement.clients,
                clock=wall_clock_ms,
            ),
            checks=self.password_checks,
        )
        self.listener = KafkaListener(
            settings.kafka,
            self.manager,
            push_log,
            enforcement=self.enforcement,
            admin=KafkaAdminHandlers(
                self.admin,
                self.authorizer,
                self.enforcement,
                wall_clock_ms,
            ),
            security=kafka_security,
            ssl_context=tls_context("kafka", security.kafka_tls),
        )
        try:
            # Bound now, served once the metadata store (SCRAM credentials) is open.
            kafka_address = await self.listener.start(serve=False)
        except OSError as error:
            raise cannot_listen("kafka", settings.kafka.host, settings.kafka.port, error) from error
        await self._start_http()
        assert self.http_address is not None
        await self.listener.serve()
        self._sweeper = asyncio.create_task(self._sweep_expired(), name="instance-expiry")
        self._serving = True
        _log.info(
            "kip714 serving: kafka=%s:%d advertised=%s:%d http=%s:%d data_dir=%s log_dir=%s "
            "exporters=%s subscriptions=%s security=%s",
            *kafka_address,
            *self.listener.advertised_address,
            *self.http_address,
            os.path.abspath(settings.data_dir),
            log_choice.log_location(settings, self.kafka_log),
            ",".join(describe_exporter(h.settings) for h in self.hosts) or "none",
            describe_subscriptions(self.manager.subscriptions),
            describe_security(security),
        )
        warn_about_exposure(settings)
        warn_about_unmatched_kinds(settings)

    async def _open_log(self) -> PushLog:
        """The ingest log ``[log] store`` names: ``<data_dir>/log/`` or the pushes topic."""
        if self.settings.log.store == "kafka":
            self.kafka_log = await log_choice.open_kafka_log(self.settings)
            return self.kafka_log
        self.log = await log_choice.open_local_log(self.settings)
        return self.log

    async def _start_http(self) -> None:
        """The HTTP listener: health, metrics, the ingestion, forward and admin routes."""
        settings = self.settings
        security = settings.security
        assert self.listener is not None
        assert self.admin is not None
        push_log: PushLog | None = self.log if self.kafka_log is None else self.kafka_log
        assert push_log is not None
        collector = ServerCollector(
            self.manager,
            self.listener,
            self.log,
            self.hosts,
            self.rollup_retention,
            readiness=self.readiness,
            lake_rollup_retention=self.lake_rollup_retention,
        )
        registry = SelfMetrics(collector)
        # The same client quotas as the Kafka listener's (SIGHUP applies to all).
        http_quotas = HttpQuotas(self.enforcement.clients)
        ingest = HttpIngest(
            manager=self.manager,
            log=push_log,
            decompressor=self.listener.decompressor,
            quotas=http_quotas,
            memory=HttpRequestMemory(self.enforcement.request_memory, settings.http.memory_wait_ms),
            refusals=self.enforcement.refusals,
            decode_threads=settings.http.decode_threads,
        )
        registry.register(HttpIngestCollector(ingest.stats))
        store_stats = getattr(self.admin.store, "stats", None)
        if store_stats is not None:  # its position, what it skipped, the topic's lag
            from telemetry.metastore.kafka_log_metrics import MetadataLogCollector  # noqa: PLC0415

            registry.register(MetadataLogCollector(store_stats))
        if self.kafka_log is not None:
            registry.register(log_choice.kafka_log_collector(self.kafka_log, self.hosts))
        for fleet in self.fleets:
            registry.register(log_choice.fleet_collector(fleet))
        forward = ForwardHandler(
            push_log,
            settings.forward,
            settings.telemetry.max_decompressed_bytes,
            http_quotas,
            authorizer=self.authorizer,
            decompressor=self.listener.decompressor,
            memory=ingest.memory,
            refusals=self.enforcement.refusals,
        )
        registry.register(ForwardCollector(forward.stats))
        guard = metrics_guard(
            settings.http.metrics_auth, self.authorizer, self.enforcement.refusals
        )
        app = create_app(
            registry.render,
            self.health,
            self.readiness,
            forward,
            exporters=lambda: {host.name: host.settings.type for host in self.hosts},
            metrics_guard=guard,
        )
        app.on_cleanup.append(registry.on_cleanup)
        store = self.admin.store
        assert self.password_checks is not None  # made with the Kafka listener's security
        authenticator = HttpAuthenticator(
            security,
            lambda: store.image.scram_credentials,
            self.password_checks,
            refusals=self.enforcement.refusals,
            max_body_bytes=settings.telemetry.max_bytes,
        )
        self.http_authenticator = authenticator
        registry.register(BasicAuthCollector(authenticator))
        add_ingest_routes(app, ingest, authenticator)
        add_admin_routes(
            app,
            self.admin,
            authorizer=self.authorizer,
            quotas=self.enforcement.clients,
            clock=wall_clock_ms,
        )
        # An idle keep-alive connection closes after connections_max_idle_ms, as on Kafka.
        idle_s = settings.limits.connections_max_idle_ms / 1000
        self._runner = web.AppRunner(app, **RUNNER_OPTIONS, keepalive_timeout=idle_s)
        await self._runner.setup()
        gate = HttpConnectionGate(
            self.enforcement.connections,
            wall_clock_ms,
            header_timeout_ms=settings.http.header_timeout_ms,
            body_timeout_ms=settings.http.body_timeout_ms,
        )
        registry.register(HttpConnectionCollector(gate.stats))
        self.http_connections = gate.stats
        site = GatedTCPSite(
            self._runner,
            settings.http_host,
            settings.http_port,
            gate=gate,
            ssl_context=tls_context("http", security.http_tls),
        )
        try:
            await site.start()
        except OSError as error:
            raise cannot_listen("http", settings.http_host, settings.http_port, error) from error
        http = self._runner.addresses[0]
        self.http_address = (str(http[0]), int(http[1]))

    def discard_created_data_dir(self) -> None:
        """After a failed start and ``stop``: remove the data directory this start created.

        A directory that existed before the start is never touched, whatever
        the start wrote into it.
        """
        created, self.created_data_dir = self.created_data_dir, None
        if created is not None and created.is_dir():
            shutil.rmtree(created, ignore_errors=True)

    @property
    def metastore(self) -> MetadataBackend | None:
        """The metadata store (dynamic changes, SCRAM credentials) while the server runs."""
        return self.admin.store if self.admin is not None else None

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
            ("instance expiry", self._stop_sweeper),
            # A change waiting for the Kafka cluster must not hold up the listeners' drain.
            ("metadata changes in flight", self._interrupt_metadata_changes),
        ]
        if self.listener is not None:
            steps.append(("kafka listener", self.listener.close))
        if self._runner is not None:
            steps.append(("http listener", self._runner.cleanup))
        steps.append(("password checks", self._close_password_checks))
        steps += [
            (name, retention.stop)
            for name, retention in (
                ("rollup retention", self.rollup_retention),
                ("lake rollup retention", self.lake_rollup_retention),
            )
            if retention is not None
        ]
        steps += [(f"exporter {host.name}", host.stop) for host in self.hosts]
        # After the landings: their last file sets are committed by this node if it is the
        # committer (a revocation waits for that), else by the next one.
        steps += [("fleet committer", fleet.stop) for fleet in self.fleets]
        if self.log is not None:
            steps.append(("ingest log", self.log.close))
        if self.kafka_log is not None:
            steps.append(("ingest log", self.kafka_log.close))
        steps.append(("metadata store", self._close_admin_plane))
        if self._data_dir_lock is not None:
            steps.append(("data directory lock", self._release_data_dir))
        for name, step in steps:
            cancelled = await run_stop_step(name, step) or cancelled
        self._note_failures()
        if self._serving:  # a failed start ends with its one error line, nothing after it
            _log.info("kip714 stopped")
        if cancelled is not None:
            raise cancelled

    async def _open_admin_plane(self) -> None:
        """Open the metadata store (replayed, or its topic read to its end); run by it from now."""
        settings = self.settings
        try:
            store = await asyncio.to_thread(
                open_store, settings.meta, settings.data_dir, check_stored_state
            )
        except (OSError, MetadataStoreError) as error:
            where = store_location(settings.meta, settings.data_dir)
            raise StartupError(f"metadata store {where}: {error}") from error
        self.admin = AdminPlane(
            store,
            self.manager.subscriptions,
            self.enforcement,
            static_subscriptions=settings.subscriptions,
            static_quotas=settings.quotas,
            limits=settings.limits,
        )
        try:
            self.admin.apply()
        except Exception as error:  # a stored value this version refuses
            raise StartupError(f"metadata store {store.location}: {error}") from error
        self.admin.follow_store()
        warn_about_unsecured_scram_users(store.image, settings.security.configured)

    async def _close_password_checks(self) -> None:
        checks, self.password_checks = self.password_checks, None
        if checks is not None:
            checks.close()

    async def _interrupt_metadata_changes(self) -> None:
        if self.admin is not None:
            self.admin.store.interrupt()

    async def _close_admin_plane(self) -> None:
        admin, self.admin = self.admin, None
        if admin is not None:
            await asyncio.to_thread(admin.store.close)

    async def _release_data_dir(self) -> None:
        lock, self._data_dir_lock = self._data_dir_lock, None
        if lock is not None:
            lock.release()

    async def _stop_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            # wait(), not `await task` under suppress(CancelledError): that would
            # also swallow a cancellation of stop() itself.
            await asyncio.wait({self._sweeper})

    def _note_failures(self) -> None:
        """Remember failures of the log and of exporters: they decide the exit status."""
        log = self.log if self.kafka_log is None else self.kafka_log
        if log is not None and log.failure is not None:
            self.failures.setdefault("ingest log", f"ingest log failed: {log.failure}")
        for host in self.hosts:
            if host.failure is not None:
                self.failures.setdefault(f"exporter {host.name}", host.failure)

    def readiness(self) -> list[str]:
        """Why the server should not get traffic now; empty when it is ready."""
        reasons: list[str] = []
        if self.stopping:
            reasons.append("the server is stopping")
        log = self.log if self.kafka_log is None else self.kafka_log
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
        return self._public_reasons(reasons)

    def reload_config(self) -> None:
        """SIGHUP: re-read subscriptions, quotas and limits from the config file.

        Clients see new subscriptions on their next request; new quotas and
        limits apply to the next request or connection, and what clients
        have used so far is kept (only the bounds change). A file that does
        not load changes nothing.
        """
        if self.settings.config_path is None:
            _log.info("SIGHUP ignored: the server runs on embedded defaults, no file to re-read")
            return
        try:
            fresh = load_settings(self.settings.config_path)
            fresh = replace(fresh, limits=fit_to_descriptors(fresh.limits, descriptor_limit()))
            if self.admin is not None:  # the file under the dynamic layer
                self.admin.reload(fresh.subscriptions, fresh.quotas, fresh.limits)
            else:
                self.enforcement.apply(fresh.quotas, fresh.limits)
        except Exception as error:
            _log.error("SIGHUP: keeping the current subscriptions, quotas and limits: %s", error)
            return
        if self.http_authenticator is not None:  # Basic clients prove themselves afresh
            self.http_authenticator.forget_all()
        _log.info(
            "SIGHUP: quotas and limits reloaded: %d client entities, %d ip entries",
            len(fresh.quotas.clients),
            len(fresh.quotas.ips),
        )
        wanted = {subscription.name for subscription in fresh.subscriptions}
        if self.admin is None:
            current = self.manager.subscriptions
            for name in [s.name for s in current if s.name not in wanted]:
                current.update(name, {})
            for subscription in fresh.subscriptions:
                current.put(subscription)
        _log.info("SIGHUP: subscriptions reloaded: %s", ", ".join(sorted(wanted)))

    def health(self) -> dict[str, object]:
        """Liveness with the details: answered while the process runs."""
        log = self.log if self.kafka_log is None else self.kafka_log
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
        if self.log is None:  # a consumer group of the topic holds nothing back
            return
        configured = {host.consumer for host in self.hosts}
        for consumer in self.log.consumers():
            if consumer.startswith(CONSUMER_PREFIX) and consumer not in configured:
                name = consumer.removeprefix(CONSUMER_PREFIX)
                _log.warning(
                    "exporter %s is no longer configured (it is not in [exporters] or has "
                    "enabled = false): forgetting its log position, so it no longer holds back "
                    "retention and gets nothing until it is configured again; then it starts "
                    "from the log's start at that time (the iceberg landing resumes from its "
                    "table's last committed offset instead)",
                    name,
                )
                await self.log.unregister(consumer)

    async def _sweep_expired(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_SWEEP_S)
            self.manager.expire(wall_clock_ms())
