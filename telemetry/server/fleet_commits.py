"""One committer for the fleet's table: file sets on the control topic, one commit per interval.

With ``[log] store = "kafka"`` every node's landing publishes its closed
generations as file sets (``exporters.iceberg.fleet``) on the control topic
``<pushes topic>_control`` (one partition, created at start like the pushes
topic) instead of committing them. Every node also runs a member of the
consumer group ``kip714-committer-<namespace>`` on that topic: the member
assigned its partition is the table's one committer. It reads where the
table stands (the control offset and the per-partition offsets stored by
the newest fleet commit), consumes the control topic from that offset,
accepts each set that continues the table (``FleetBatch.offer``), and every
``commit_interval_s`` adds every accepted set in one snapshot, through its
own landing's first lane (a worker process), which checks contiguity again
on the table it commits to (``commits.commit_fleet``). A committer whose
partition moved to another node (a zombie) finds the table's control offset
moved and commits nothing; it then reads the table again.

Bounds: a file set record is at most ``MAX_FILE_SET_BYTES`` (larger ones are
skipped and counted); the accepted sets wait at most one interval (plus a
failed commit's retries) in memory; each consume takes at most
``CONSUME_BATCH`` records and ``CONSUME_WAIT_S`` of the consumer's thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from exporters.iceberg.exporter import COMMIT_BUCKETS_S
from exporters.iceberg.fleet import ControlRange, FileSet, FileSetError, FleetBatch
from telemetry.cluster import topics as cluster_topics
from telemetry.cluster.topics import ClientLog, ClusterError, TopicLayout, topic_identity
from telemetry.server.kafka_exporter_host import SESSION_TIMEOUT_MS
from telemetry.server.loop_calls import wait_on_loop

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from confluent_kafka import Message
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._metadata import TopicMetadata

    from exporters.iceberg.exporter import IcebergExporter
    from exporters.iceberg.lane_messages import FleetState
    from telemetry.cluster.connection import ClusterConnection

__all__ = ["FleetCommits", "FleetStats", "committer_group", "control_topic"]

_log = logging.getLogger(__name__)

CONTROL_SUFFIX: Final = "_control"
#: Longer records are not file sets of this version (a set names a generation's files).
MAX_FILE_SET_BYTES: Final = 1 << 20
CONSUME_BATCH: Final = 500
CONSUME_WAIT_S: Final = 0.5
PUBLISH_TIMEOUT_S: Final = 30.0
_STATE_TIMEOUT_S: Final = 60.0
_STATE_RETRY_S: Final = (0.5, 10.0)

_T = TypeVar("_T")


def control_topic(pushes_topic: str) -> str:
    return pushes_topic + CONTROL_SUFFIX


def committer_group(namespace: str) -> str:
    return f"kip714-committer-{namespace}"


def _control_layout() -> TopicLayout:
    def check(admin: AdminClient, existing: TopicMetadata, timeout_s: float) -> None:
        del admin, timeout_s
        if len(existing.partitions) != 1:
            raise ClusterError(
                f"topic {existing.topic} has {len(existing.partitions)} partitions: the "
                "control topic must have exactly one (its one reader is the committer)"
            )

    return TopicLayout(
        partitions=1,
        configs=lambda replicas: {"min.insync.replicas": str(min(2, replicas))},
        check=check,
    )


@dataclass(slots=True)
class FleetStats:
    """What /metrics shows of the fleet's commits, seen from this node."""

    committer: bool = False
    commits: int = 0
    sets_added: int = 0
    sets_dropped: int = 0
    sets_pending: int = 0
    undecodable: int = 0
    fenced: int = 0
    failures: int = 0
    commit_seconds_total: float = 0.0
    commit_bucket_counts: list[int] | None = None

    def observe(self, seconds: float) -> None:
        if self.commit_bucket_counts is None:
            self.commit_bucket_counts = [0] * (len(COMMIT_BUCKETS_S) + 1)
        self.commit_seconds_total += seconds
        index = next((i for i, b in enumerate(COMMIT_BUCKETS_S) if seconds <= b), -1)
        self.commit_bucket_counts[index] += 1


class FleetCommits:
    """This node's publisher of file sets and its member of the committer group."""

    def __init__(
        self,
        cluster: ClusterConnection,
        pushes_topic: str,
        exporter: IcebergExporter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.topic = control_topic(pushes_topic)
        self.group = committer_group(exporter.location.namespace)
        self.exporter = exporter
        self.stats = FleetStats()
        self.interval_s = exporter.commit_interval_s
        self._clock = clock
        self._clients = ClientLog("fleet control topic", "telemetry.server.fleet_commits.client")
        self._topic_id = ""
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._calls = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = threading.Event()
        #: The committer's state, set on assignment (on the consumer's thread, while the task
        #: waits for ``consume``) and used by the task between consumes.
        self._batch: FleetBatch | None = None
        self._control_start: int | None = None
        self._control_end = 0
        self._due = 0.0
        self._failing = False

    # -- start and stop --------------------------------------------------------------------

    async def prepare(self) -> None:
        """Create the control topic if missing, open the producer, route the landing's sets.

        Before the landing starts (``use_fleet``).

        Raises:
            ClusterError: the topic could not be created or described in time.
        """
        self._loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self.cluster.startup_timeout_s
        ready = await asyncio.to_thread(
            cluster_topics.ensure_topic,
            self.cluster,
            self.topic,
            _control_layout(),
            self._clients,
            deadline,
        )
        if ready.created_replicas is not None:
            _log.info("created the fleet's control topic %s", self.topic)
        _, self._topic_id = await asyncio.to_thread(
            topic_identity, self.cluster, self.topic, self.cluster.startup_timeout_s
        )
        self._producer = Producer(
            {
                **self.cluster.client_config(),
                **self._clients.callbacks(),
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
            }
        )
        self._clients.opened = True
        self.exporter.use_fleet(self.publish)

    def start(self) -> None:
        """Join the committer group (after the landing started: a committer commits through it)."""
        consumer = Consumer(
            {
                **self.cluster.client_config(),
                **self._clients.callbacks(),
                "group.id": self.group,
                "group.protocol": "classic",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "fetch.max.bytes": 4 * MAX_FILE_SET_BYTES,
            }
        )
        consumer.subscribe(
            [self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
        )
        self._consumer = consumer
        self._task = asyncio.create_task(self._run(), name="fleet-committer")
        self._task.add_done_callback(self._task_done)

    async def stop(self) -> None:
        """Leave the group (another node becomes committer at once), close the producer."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        with self._calls:
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                try:
                    consumer.close()
                except Exception as error:  # the cluster away: the session expires instead
                    _log.warning("fleet committer: closing its consumer: %s", error)
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(5.0)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            _log.error(
                "the fleet committer's task died; this node no longer commits for the fleet",
                exc_info=task.exception(),
            )

    # -- every node: publishing ------------------------------------------------------------

    async def publish(self, value: bytes) -> None:
        """Append one file set to the control topic; return once the cluster acknowledged it.

        Raises:
            ClusterError: not acknowledged within ``PUBLISH_TIMEOUT_S``.
        """
        await asyncio.to_thread(self._produce, value)

    def _produce(self, value: bytes) -> None:
        producer = self._producer
        if producer is None:
            raise ClusterError("the fleet's control topic producer is closed")
        errors: list[KafkaError | None] = []
        producer.produce(self.topic, value, on_delivery=lambda e, _m: errors.append(e))
        left = producer.flush(PUBLISH_TIMEOUT_S)
        if left or not errors or errors[0] is not None:
            raise ClusterError(
                f"file set not acknowledged by {self.topic}: "
                f"{errors[0] if errors and errors[0] else 'timed out'}"
            )

    # -- the committer ---------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                messages = await asyncio.to_thread(self._take)
                for message in messages:
                    self._offer(message)
                if self._batch is not None and self._clock() >= self._due:
                    await self._commit()
                self._succeeded()
            except Exception as error:  # every failure is retried at the next interval
                self._failed(error)
                await asyncio.sleep(min(self.interval_s, 1.0))

    def _take(self) -> list[Message]:
        with self._calls:
            consumer = self._consumer
            if consumer is None:
                return []
            messages: list[Message] = consumer.consume(CONSUME_BATCH, CONSUME_WAIT_S)
            return messages

    def _offer(self, message: Message) -> None:
        batch, offset = self._batch, message.offset()
        if batch is None or message.error() is not None or offset is None:
            return
        self._control_end = offset + 1
        value = message.value()
        try:
            if value is not None and len(value) > MAX_FILE_SET_BYTES:
                raise FileSetError(f"{len(value)} bytes, more than {MAX_FILE_SET_BYTES}")
            file_set = FileSet.decode(value)
        except FileSetError as error:
            self.stats.undecodable += 1
            _log.error("fleet committer: skipping %s offset %d: %s", self.topic, offset, error)
            return
        if file_set.namespace != self.exporter.location.namespace:
            return  # another namespace's table: its own committer's
        if not batch.offer(file_set):
            self.stats.sets_dropped += 1
            _log.warning(
                "fleet committer: dropped file set %s of node %s: it does not continue the "
                "table (%s); its files are orphans",
                file_set.set_id,
                file_set.node_id,
                dict(sorted(file_set.ranges.items())),
            )
        self.stats.sets_pending = len(batch.accepted)

    async def _commit(self) -> None:
        """Add the accepted sets in one snapshot; a zombie (fenced) reads the table again."""
        batch = self._batch
        assert batch is not None
        if not batch.accepted:
            return  # still due: a set that arrives now is committed at once, not an interval on
        self._due = self._clock() + self.interval_s
        started = self._clock()
        control = ControlRange(self._topic_id, self._control_start, self._control_end)
        outcome = await self.exporter.commit_fleet(list(batch.accepted), control)
        if outcome.fenced:
            self.stats.fenced += 1
            _log.warning("fleet committer: %s; reading the table again", outcome.error)
            await self._reload_state()
            return
        if outcome.error is not None:
            raise ClusterError(f"fleet commit failed: {outcome.error}")
        self.stats.observe(self._clock() - started)
        self.stats.commits += 1
        self.stats.sets_added += len(outcome.added)
        self.stats.sets_dropped += len(outcome.dropped)
        self._control_start = self._control_end
        batch.accepted.clear()
        self.stats.sets_pending = 0
        await asyncio.to_thread(self._commit_group_offset, self._control_end)

    def _commit_group_offset(self, offset: int) -> None:
        """The group's offset follows the table's (what lag tools show); the table is the truth."""
        with self._calls:
            if self._consumer is not None:
                self._consumer.commit(
                    offsets=[TopicPartition(self.topic, 0, offset)], asynchronous=True
                )

    async def _reload_state(self) -> None:
        """Where the table stands: a new batch from its offsets, the control topic sought there."""
        state = await self.exporter.fleet_state(self._topic_id)
        self._begin(state)
        await asyncio.to_thread(self._seek, state.control_offset)

    def _begin(self, state: FleetState) -> None:
        topic = self.exporter.topic_binding
        assert topic is not None
        self._batch = FleetBatch(topic.topic_id, dict(state.offsets))
        self._control_start = state.control_offset
        self._control_end = state.control_offset or 0
        self._due = self._clock() + self.interval_s
        self.stats.committer = True
        self.stats.sets_pending = 0

    def _seek(self, offset: int | None) -> None:
        with self._calls:
            if self._consumer is not None:
                at = OFFSET_BEGINNING if offset is None else offset
                self._consumer.seek(TopicPartition(self.topic, 0, at))

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """This node is the committer now: resume from the control offset the table stored."""
        if not partitions:
            consumer.assign(partitions)
            return
        delay, longest = _STATE_RETRY_S
        while True:
            try:
                state = self._on_loop(lambda: self.exporter.fleet_state(self._topic_id))
                break
            except Exception as error:
                if self._stopping.is_set():
                    consumer.assign(partitions)
                    consumer.pause(partitions)
                    return
                _log.warning("fleet committer: cannot read the table yet (%s); retrying", error)
                time.sleep(delay)
                delay = min(delay * 2, longest)
        for partition in partitions:
            at = state.control_offset
            partition.offset = OFFSET_BEGINNING if at is None else at
        consumer.assign(partitions)
        self._begin(state)
        _log.info(
            "this node commits for the fleet now (group %s): from %s offset %s",
            self.group,
            self.topic,
            "start" if state.control_offset is None else state.control_offset,
        )

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        del consumer
        if partitions and self.stats.committer:
            _log.info("this node no longer commits for the fleet")
        self._batch = None
        self.stats.committer = False
        self.stats.sets_pending = 0

    def _on_loop(self, call: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run ``call()`` on the event loop; wait here (bounded): see ``loop_calls``."""
        return wait_on_loop(self._loop, call, _STATE_TIMEOUT_S)

    def _failed(self, error: Exception) -> None:
        self.stats.failures += 1
        if not self._failing:
            self._failing = True
            _log.error("fleet committer: %s; retrying every interval", error)

    def _succeeded(self) -> None:
        if self._failing:
            self._failing = False
            _log.info("fleet committer recovered")
