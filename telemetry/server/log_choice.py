"""The choice of ingest log at start: ``<data_dir>/log/`` or the pushes topic (``[log] store``).

The doors see either through ``ingress.PushLog``; the exporters are fed by
an ``ExporterHost`` (the local log) or a ``KafkaExporterHost`` (a consumer
group on the topic). confluent-kafka loads only for a node whose log is in
the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from exporters.api import BufferingExporter, PartitionedExporter
from telemetry.ingest import IngestLog
from telemetry.ingest.inspection import inspect_log
from telemetry.server.exporter_host import ExporterHost
from telemetry.server.startup import StartupError, start_hint

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from prometheus_client.registry import Collector

    from exporters.api import Exporter
    from telemetry.ingest.config import LogConfig
    from telemetry.ingest.kafka_log import KafkaPushLog
    from telemetry.server.config import ExporterSettings, Settings
    from telemetry.server.fleet_commits import FleetCommits

__all__ = [
    "exporter_host",
    "fleet_collector",
    "fleet_commits",
    "kafka_log_collector",
    "log_location",
    "open_kafka_log",
    "open_local_log",
    "start_exporter",
]

_log = logging.getLogger(__name__)


async def open_local_log(settings: Settings) -> IngestLog:
    try:
        return await IngestLog.open(settings.log_dir, settings.log)
    except (OSError, ValueError) as error:
        raise StartupError(f"ingest log {settings.log_dir}: {error}") from error


async def open_kafka_log(settings: Settings) -> KafkaPushLog:
    """The pushes topic, created if missing; refused while a local log holds unexported pushes."""
    from telemetry.cluster.topics import ClusterError  # noqa: PLC0415
    from telemetry.ingest.kafka_log import KafkaPushLog  # noqa: PLC0415

    await refuse_unexported_local_log(settings.log_dir)
    try:
        return await KafkaPushLog.open(settings.log)
    except ClusterError as error:
        raise StartupError(f"ingest log {error}") from error


async def refuse_unexported_local_log(log_dir: Path) -> None:
    """Pushes left in a local log would never be exported once the log is in Kafka."""
    if not log_dir.is_dir():
        return
    try:
        found = await asyncio.to_thread(inspect_log, log_dir)
    except (OSError, ValueError) as error:
        raise StartupError(f"ingest log {log_dir}: {error}") from error
    behind = {
        name: found.log_end - at for name, at in found.positions.items() if at < found.log_end
    }
    if not found.positions and found.log_end > found.log_start:
        behind = {"(no exporter)": found.log_end - found.log_start}
    if behind:
        name, records = max(behind.items(), key=lambda item: item[1])
        raise StartupError(
            f"ingest log {log_dir} holds {records} pushes {name} has not exported: "
            'run once with [log] store = "local" until `kip714 log status` shows no lag, '
            'then store = "kafka"'
        )


def exporter_host(
    settings: ExporterSettings, exporter: Exporter, log: IngestLog | None, config: LogConfig
) -> ExporterHost:
    """The host that feeds ``exporter`` from the local ``log``, or (``None``) from the topic."""
    if log is not None:
        return ExporterHost(settings, exporter, log)
    from telemetry.server.kafka_exporter_host import KafkaExporterHost  # noqa: PLC0415

    if isinstance(exporter, BufferingExporter) and not isinstance(exporter, PartitionedExporter):
        raise StartupError(
            f"exporters.{settings.name} ({settings.type}) keeps one position for the whole "
            'log, which [log] store = "kafka" cannot feed (its partitions move between nodes): '
            f"set [exporters.{settings.name}] enabled = false"
        )
    return KafkaExporterHost(settings, exporter, config)


async def start_exporter(
    settings: ExporterSettings,
    exporter: Exporter,
    log: IngestLog | None,
    config: LogConfig,
    hosts: list[ExporterHost],
    fleets: list[FleetCommits],
) -> None:
    """Start ``exporter``'s host (added to ``hosts``) and, for a landing fed from the topic,
    its part in the fleet's commits (added to ``fleets``).

    Raises:
        StartupError: It could not start: one line, with a hint.
    """
    host = exporter_host(settings, exporter, log, config)
    hosts.append(host)
    fleet = fleet_commits(exporter, config)
    try:
        if fleet is not None:
            await fleet.prepare()  # the landing publishes file sets from its start
        await host.start()
        if fleet is not None:
            fleets.append(fleet)
            fleet.start()
    except Exception as error:  # a plugin's own failure, reported as one line
        _log.debug("exporter %s failed to start", host.name, exc_info=True)
        raise StartupError(
            f"exporters.{host.name} could not start: {error}{start_hint(settings)}"
        ) from error


def log_location(settings: Settings, kafka_log: KafkaPushLog | None) -> str:
    """Where pushes go, as one token of the serving line."""
    if kafka_log is not None:
        return kafka_log.token
    return os.path.abspath(settings.log_dir)


def kafka_log_collector(log: KafkaPushLog, hosts: Sequence[ExporterHost]) -> Collector:
    from telemetry.server.kafka_log_metrics import KafkaLogCollector  # noqa: PLC0415

    return KafkaLogCollector(log, hosts)


def fleet_commits(exporter: Exporter, config: LogConfig) -> FleetCommits | None:
    """The fleet's committer membership of an Iceberg landing fed from the topic, else ``None``."""
    from exporters.iceberg.exporter import IcebergExporter  # noqa: PLC0415

    if config.store != "kafka" or not isinstance(exporter, IcebergExporter):
        return None
    if not exporter.fleet_commits:
        return None
    from telemetry.server.fleet_commits import FleetCommits  # noqa: PLC0415

    assert config.cluster is not None  # parse_log sets it for store = "kafka"
    return FleetCommits(config.cluster, config.topic, exporter)


def fleet_collector(fleet: FleetCommits) -> Collector:
    from telemetry.server.fleet_metrics import FleetCollector  # noqa: PLC0415

    return FleetCollector(fleet)
