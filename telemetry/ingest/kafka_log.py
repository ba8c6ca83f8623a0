"""The ingest log in a topic of the user's Kafka cluster (``[log] store = "kafka"``).

The doors see the same small interface as the local log's
(``ingress.PushLog.append_nowait``: a future done once the push is
durable), so whether a push is acknowledged after this node's fsync or
after the cluster's ``acks=all`` is decided here and nowhere else.

One idempotent producer, ``acks=all``: a push's future is done only once
the cluster acknowledged the record. Each record is the local log's frame
(``record.encode_frame``: the push context with the forward route's broker
attributes, and the payload as sent), its offset field 0 (the Kafka offset
is the record's position), keyed by client instance id so one instance
stays on one partition.

librdkafka serves delivery reports inside ``poll``; a thread of this class
polls, gathers the reports of one poll and hands them to the event loop
with one ``call_soon_threadsafe``, so the loop never waits on the cluster.
The same thread asks for the cluster's metadata every
:data:`PROBE_S`: while the cluster cannot be reached or the topic is
missing, pushes are refused as when a local log is full
(:class:`~telemetry.ingest.errors.LogFullError`, ``full_throttle_ms``) and
``full`` tells readiness why. The topic is created only at start.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from telemetry.cluster import topics as cluster_topics
from telemetry.cluster.topics import ClientLog, TopicLayout
from telemetry.ingest.errors import LogClosedError, LogFullError, RecordTooLargeError
from telemetry.ingest.record import (
    HEADER,
    MAX_BODY,
    FrameError,
    check_body,
    decode_checked_body,
    decoded_size,
    encode_frame,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._metadata import TopicMetadata

    from exporters.api import LoggedPush
    from telemetry.cluster.connection import ClusterConnection
    from telemetry.ingest.config import LogConfig
    from telemetry.ingest.record import PushContext

__all__ = [
    "ACK_BUCKETS_S",
    "REFUSAL_KEY",
    "KafkaLogStats",
    "KafkaPushLog",
    "decode_record",
    "pushes_topic_layout",
]

_log = logging.getLogger(__name__)

#: How long a push may wait for the cluster (``message.timeout.ms``); then it
#: is answered as refused (throttled), never as acknowledged.
DELIVERY_TIMEOUT_MS: Final = 15_000
#: How often the poll thread asks whether the cluster and the topic are there.
PROBE_S: Final = 1.0
_PROBE_TIMEOUT_S: Final = 2.0
_POLL_S: Final = 0.05
_CLOSE_FLUSH_S: Final = 10.0
_JOIN_S: Final = 10.0
#: The ``[log]`` key a push refused because the cluster is unreachable is counted under
#: (``kip714_requests_refused_total{reason}``).
REFUSAL_KEY: Final = "bootstrap_servers"
#: Upper bounds (seconds) of the acknowledgement latency histogram.
ACK_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
#: Delivery errors that mean the topic is gone (deleted under a running node).
_TOPIC_GONE: Final = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})


@dataclass(slots=True)
class KafkaLogStats:
    """Counters of the producer side (``kip714_log_*`` on /metrics); the loop writes them."""

    appends: int = 0
    acknowledged: int = 0
    delivery_failures: int = 0
    refused_unavailable: int = 0
    ack_seconds_total: float = 0.0
    ack_bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(ACK_BUCKETS_S) + 1))
    #: Kept for readiness, as the local log's: why pushes are refused now.
    full: bool = False
    last_refusal_reason: str = ""

    def observe_ack(self, seconds: float) -> None:
        self.acknowledged += 1
        self.ack_seconds_total += seconds
        self.ack_bucket_counts[bisect.bisect_left(ACK_BUCKETS_S, seconds)] += 1  # last: overflow


def pushes_topic_layout(config: LogConfig) -> TopicLayout:
    """``partitions``; replication min(3, brokers); min.insync.replicas min(2, replication)."""

    def check(admin: AdminClient, existing: TopicMetadata, timeout_s: float) -> None:
        del admin, existing, timeout_s  # any partition count serves: keys spread over them

    return TopicLayout(
        partitions=config.partitions,
        configs=lambda replicas: {"min.insync.replicas": str(min(2, replicas))},
        check=check,
    )


def client_log() -> ClientLog:
    return ClientLog("ingest log", "telemetry.ingest.kafka_log.client")


class KafkaPushLog:
    """Pushes appended to the topic; open with ``await KafkaPushLog.open(config)``."""

    def __init__(self, config: LogConfig, cluster: ClusterConnection, clients: ClientLog) -> None:
        self._config = config
        self._cluster = cluster
        self._clients = clients
        self._topic = config.topic
        self._max_frame = config.max_record_bytes
        self.stats = KafkaLogStats()
        self._loop = asyncio.get_running_loop()
        self._producer = Producer(
            {
                **cluster.client_config(),
                **clients.callbacks(),
                "acks": "all",
                # No duplicates and one order per partition across retries and a broker restart.
                "enable.idempotence": True,
                "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                # Kafka's own default since 4.0 (KIP-1030) and librdkafka's: at 1 ms the
                # broker took a produce request per push or two (0.4-0.8 of a core at
                # 500-1,000 pushes/s); 5 ms gathers them for at most 5 ms more per ack.
                "linger.ms": 5,
            }
        )
        #: Why pushes are refused now (the cluster unreachable, the topic missing), else None.
        self._unavailable: str | None = None
        self._reports: list[tuple[asyncio.Future[None], float, KafkaError | None]] = []
        self._stopping = threading.Event()
        self._closing = False
        self._close_task: asyncio.Future[None] | None = None
        self._thread = threading.Thread(target=self._run, name="ingest-log-producer", daemon=True)

    @classmethod
    async def open(cls, config: LogConfig) -> KafkaPushLog:
        """Create the topic if missing, within ``startup_timeout_s``, then start producing.

        Raises:
            ClusterTimeoutError: the cluster did not answer in time.
            ClusterError: the topic could not be created.
        """
        cluster = config.cluster
        assert cluster is not None  # parse_log sets it for store = "kafka"
        clients = client_log()
        deadline = time.monotonic() + cluster.startup_timeout_s
        ready = await asyncio.to_thread(
            cluster_topics.ensure_topic,
            cluster,
            config.topic,
            pushes_topic_layout(config),
            clients,
            deadline,
        )
        if ready.created_replicas is not None:
            _log.info(
                "created the pushes topic %s (%d partitions, replication %d)",
                config.topic,
                config.partitions,
                ready.created_replicas,
            )
        log = cls(config, cluster, clients)
        clients.opened = True
        log._thread.start()
        return log

    # -- the doors' interface (ingress.PushLog) ----------------------------------------------

    def append_nowait(
        self,
        context: PushContext,
        payload: bytes,
        compression: int = 0,
        decompressed_size: int = -1,
    ) -> tuple[int, asyncio.Future[None]]:
        """Produce one push; a future done once the cluster acknowledged it.

        The offset is the cluster's, known only then: -1 is returned (no door
        uses it). The future fails with ``LogFullError`` (answered as a full
        log: throttled, retryable) if the cluster did not take the record.

        Raises:
            LogFullError: the cluster cannot be reached or the topic is missing.
            RecordTooLargeError: the record exceeds ``max_record_bytes``.
            LogClosedError: the log is closing.
        """
        if self._closing:
            raise LogClosedError("ingest log is closed")
        unavailable = self._unavailable
        if unavailable is not None:
            raise self._refuse(unavailable)
        head, length = encode_frame(0, context, payload, compression, decompressed_size)
        size = len(payload) if decompressed_size < 0 else decompressed_size
        decoded = length - len(payload) + size  # the record as exporters get it
        if max(length, decoded) > self._max_frame:
            raise RecordTooLargeError(
                f"record of {max(length, decoded)} bytes exceeds {self._max_frame}"
            )
        future: asyncio.Future[None] = self._loop.create_future()
        started = time.perf_counter()

        def delivered(error: KafkaError | None, _message: Message) -> None:
            # Inside poll() or flush(), on the thread that hands the reports over.
            self._reports.append((future, started, error))

        try:
            self._producer.produce(
                self._topic,
                value=head + payload,
                key=context.client_instance_id.encode(),
                on_delivery=delivered,
            )
        except BufferError:
            raise self._refuse("the producer's queue is full: the cluster is slow") from None
        except KafkaException as error:
            raise self._refuse(f"the producer refused the record: {error}") from None
        self.stats.appends += 1
        return -1, future

    def _refuse(self, why: str) -> LogFullError:
        stats = self.stats
        stats.refused_unavailable += 1
        stats.last_refusal_reason = f"ingest log topic {self._topic}: {why}"
        return LogFullError(self._config.full_throttle_ms, stats.last_refusal_reason, REFUSAL_KEY)

    # -- what readiness and /metrics read ----------------------------------------------------

    @property
    def full(self) -> bool:
        """True while pushes are refused: the cluster unreachable or the topic missing."""
        return self._unavailable is not None

    @property
    def failure(self) -> str | None:
        """A fatal producer error (the idempotent producer cannot go on), else ``None``."""
        fatal = self._clients.fatal
        return None if fatal is None else f"fatal producer error: {fatal}"

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def token(self) -> str:
        """Where pushes go, as one word of the serving line: ``kafka:TOPIC@BOOTSTRAP``."""
        return f"kafka:{self._topic}@{self._cluster.bootstrap_servers}"

    @property
    def location(self) -> str:
        return f"topic {self._topic} at {self._cluster.bootstrap_servers}"

    # -- the poll thread ----------------------------------------------------------------------

    def _run(self) -> None:
        probed = 0.0
        try:
            while not self._stopping.is_set():
                self._producer.poll(_POLL_S)
                self._hand_over()
                now = time.monotonic()
                if now - probed >= PROBE_S:
                    probed = now
                    self._set_unavailable(self._probe())
        except Exception as error:
            _log.exception("the ingest log's producer thread failed: pushes are refused")
            self._set_unavailable(f"the producer thread failed: {error}")

    def _hand_over(self) -> None:
        """The reports of the last poll, to the loop in one call."""
        if not self._reports:
            return
        reports, self._reports = self._reports, []
        try:
            self._loop.call_soon_threadsafe(self._settle, reports)
        except RuntimeError:  # the loop is closed: nobody waits for these answers
            return

    def _probe(self) -> str | None:
        """Why the topic cannot take pushes now, else ``None`` (blocking, on the poll thread)."""
        try:
            metadata = self._producer.list_topics(timeout=_PROBE_TIMEOUT_S)  # never auto-creates
        except KafkaException as error:
            return f"cannot reach the cluster at {self._cluster.bootstrap_servers}: {error}"
        topic = metadata.topics.get(self._topic)
        if topic is None or topic.error is not None:
            return "pushes topic missing (it is created only at start)"
        return None

    def _set_unavailable(self, why: str | None) -> None:
        was, self._unavailable = self._unavailable, why
        if was is None and why is not None:
            _log.warning("ingest log %s: %s; refusing pushes as a full log", self.location, why)
        elif was is not None and why is None:
            _log.info("ingest log %s: reachable again; accepting pushes", self.location)
        self.stats.full = why is not None
        if why is not None:
            self.stats.last_refusal_reason = f"ingest log topic {self._topic}: {why}"

    # -- the loop's side of the reports --------------------------------------------------------

    def _settle(self, reports: list[tuple[asyncio.Future[None], float, KafkaError | None]]) -> None:
        now = time.perf_counter()
        throttle_ms = self._config.full_throttle_ms
        for future, started, error in reports:
            if error is None:
                self.stats.observe_ack(now - started)
                if not future.done():
                    future.set_result(None)
                continue
            self.stats.delivery_failures += 1
            if error.code() in _TOPIC_GONE:
                self._set_unavailable("pushes topic missing (it is created only at start)")
            reason = f"ingest log topic {self._topic} did not take the push: {error.str()}"
            if not future.done():
                future.set_exception(LogFullError(throttle_ms, reason, REFUSAL_KEY))

    # -- lifecycle ----------------------------------------------------------------------------

    async def close(self) -> None:
        """Refuse new pushes, give those in flight :data:`_CLOSE_FLUSH_S` to be acknowledged.

        Every push's future is answered: what the cluster did not acknowledge
        by then is purged and answered as refused. Idempotent; a cancelled
        caller does not stop the close half-way.
        """
        if self._close_task is None:
            self._closing = True
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        self._stopping.set()
        await asyncio.to_thread(self._thread.join, _JOIN_S)
        left = await asyncio.to_thread(self._producer.flush, _CLOSE_FLUSH_S)
        if left:
            _log.warning(
                "ingest log %s: %d pushes not acknowledged within %.0f s of closing; "
                "answered as refused",
                self.location,
                left,
                _CLOSE_FLUSH_S,
            )
            self._producer.purge()
            self._producer.poll(0)  # serves the purged records' reports
        reports, self._reports = self._reports, []
        self._settle(reports)


def decode_record(
    value: bytes | None, partition: int, offset: int, max_bytes: int = MAX_BODY
) -> LoggedPush:
    """A record of the pushes topic as exporters get it: the frame, checked and decoded.

    ``max_bytes`` bounds the record decoded (its payload decompressed): the
    node's ``max_record_bytes``, the most any node appends; a record
    declaring more (any producer with Write on the topic may add one) is
    refused before anything is decompressed.

    Raises:
        FrameError: not a whole frame of the log's format, its checksum
            fails, it declares more than ``max_bytes`` decoded, or its
            payload does not decompress to its declared size.
    """
    if value is None or len(value) < HEADER.size:
        raise FrameError(0, "not a record of the ingest log (no frame header)")
    length, crc = HEADER.unpack_from(value, 0)
    if HEADER.size + length != len(value):
        raise FrameError(0, f"frame of {length} bytes in a record of {len(value)}")
    check_body(value, HEADER.size, len(value), crc, 0)
    decoded = decoded_size(value, HEADER.size, len(value))
    if decoded > max_bytes:
        raise FrameError(0, f"record declares {decoded} bytes decoded, over {max_bytes}")
    push = decode_checked_body(value, HEADER.size, len(value))
    return replace(push, offset=offset, partition=partition)
