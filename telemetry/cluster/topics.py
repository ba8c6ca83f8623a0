"""A store's topic, created at start if missing, and what its librdkafka clients log.

:func:`ensure_topic` is the start of every store in the cluster: ask for the
cluster's metadata (all topics, so the request never auto-creates one) until
``startup_timeout_s`` is over, then judge the topic that exists or create it,
replicated as the cluster allows (``min(3, brokers)``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

if TYPE_CHECKING:
    from collections.abc import Callable

    from confluent_kafka.admin._metadata import ClusterMetadata, TopicMetadata

    from telemetry.cluster.connection import ClusterConnection


class ClusterError(Exception):
    """The store's topic is unusable, or could not be created."""


class ClusterTimeoutError(ClusterError):
    """The cluster did not answer within ``startup_timeout_s``."""


class ClientLog:
    """librdkafka's log lines and errors, quiet (debug) until the store is open.

    A start that fails must end with its one error line, not the client's
    connection attempts before it. ``what`` names the store in its lines.
    """

    def __init__(self, what: str, logger_name: str) -> None:
        self.opened = False
        self.fatal: KafkaError | None = None
        self.what = what
        self._logger = logging.getLogger(logger_name)

    def log(self, level: int, message: str, *args: object) -> None:
        """librdkafka's ``logger`` callback (served by poll / flush).

        At most a warning: the client retries what it logs as an error (a
        broker down), and what does fail reaches the store's callers as their error.
        """
        shown = min(level, logging.WARNING) if self.opened else logging.DEBUG
        self._logger.log(shown, message, *args)

    def error(self, error: KafkaError) -> None:
        """librdkafka's ``error_cb``: most are transient (a broker down, a timeout)."""
        if error.fatal():
            self.fatal = error
            self._logger.error("%s client: fatal error: %s", self.what, error)
            return
        self._logger.log(
            logging.WARNING if self.opened else logging.DEBUG, "%s client: %s", self.what, error
        )

    def callbacks(self) -> dict[str, Any]:
        """The librdkafka settings that route a client's logs and errors here."""
        return {"logger": self, "error_cb": self.error}


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """What a store's topic must be: made this way when missing, judged by ``check`` when found.

    ``configs`` gets the replication factor the topic is created with.
    ``check`` gets the admin client, the topic's metadata and the seconds
    left; it raises to refuse a topic that exists in a shape the store cannot use.
    """

    partitions: int
    configs: Callable[[int], dict[str, str]]
    check: Callable[[AdminClient, TopicMetadata, float], None]


@dataclass(frozen=True, slots=True)
class TopicReady:
    """The cluster's metadata as last read; the replication if this call created the topic."""

    metadata: ClusterMetadata
    created_replicas: int | None


def ensure_topic(
    connection: ClusterConnection,
    topic: str,
    layout: TopicLayout,
    client_log: ClientLog,
    deadline: float,
) -> TopicReady:
    """Create ``topic`` as ``layout`` says if missing, else let ``layout.check`` judge it.

    Raises:
        ClusterTimeoutError: the cluster did not answer in time.
        ClusterError: creation failed; ``layout.check`` raises what it raises.
    """
    admin = AdminClient({**connection.client_config(), **client_log.callbacks()})
    where = f"topic {topic} at {connection.bootstrap_servers}"

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ClusterTimeoutError(
                f"{where}: the cluster did not answer within {connection.startup_timeout_s:g} s"
            )
        return left

    while True:
        try:
            metadata = admin.list_topics(timeout=remaining())  # all topics: never auto-creates
        except KafkaException:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            continue
        existing = metadata.topics.get(topic)
        if existing is not None and existing.error is None:
            layout.check(admin, existing, remaining())
            return TopicReady(metadata, None)
        replicas = min(3, max(1, len(metadata.brokers)))
        created = admin.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=layout.partitions,
                    replication_factor=replicas,
                    config=layout.configs(replicas),
                )
            ],
            request_timeout=min(remaining(), 15.0),
        )
        try:
            created[topic].result(timeout=remaining())
        except KafkaException as error:
            kafka_error = error.args[0] if error.args else None
            if isinstance(kafka_error, KafkaError) and kafka_error.code() in (
                KafkaError.TOPIC_ALREADY_EXISTS,
                KafkaError.REQUEST_TIMED_OUT,
                KafkaError._TIMED_OUT,
            ):
                continue  # another node created it meanwhile, or ask again
            raise ClusterError(f"{where}: cannot create it: {kafka_error or error}") from None
        return TopicReady(metadata, replicas)


def topic_identity(connection: ClusterConnection, topic: str, timeout_s: float) -> tuple[str, str]:
    """(cluster id, topic id) of ``topic``: what tells a recreated topic from the one before.

    Kafka gives a topic a new id when it is created again under the same
    name, and a new cluster a new cluster id; offsets mean something only
    within one topic id.

    Raises:
        ClusterError: the cluster did not describe them within ``timeout_s``.
    """
    config: dict[str, Any] = {**connection.client_config()}
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    while True:  # a topic just created is unknown to a broker until its metadata arrives
        left = max(0.1, deadline - time.monotonic())
        try:
            cluster = admin.describe_cluster(request_timeout=left).result(timeout=left)
            described = admin.describe_topics(TopicCollection([topic]), request_timeout=left)
            description = described[topic].result(timeout=left)
        except (KafkaException, TimeoutError) as error:
            kafka_error = error.args[0] if error.args else None
            unknown = isinstance(kafka_error, KafkaError) and kafka_error.code() == (
                KafkaError.UNKNOWN_TOPIC_OR_PART
            )
            if unknown and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            raise ClusterError(
                f"topic {topic} at {connection.bootstrap_servers}: cannot describe it: {error}"
            ) from None
        return str(cluster.cluster_id), str(description.topic_id)
