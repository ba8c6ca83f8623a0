"""Feeds one exporter from the pushes topic, as a member of its consumer group.

With ``[log] store = "kafka"`` every node runs each exporter as a member of
the group ``kip714-<exporter name>-<namespace>`` (the classic protocol,
``session.timeout.ms`` = 10 s, so a lost node's partitions move to the
others within about that), and the fleet delivers each push once per
exporter, at least once, in order per partition.

The loop, its backoff, readiness and the bounded stop are
:class:`~telemetry.server.exporter_host.ExporterHost`'s; this class replaces
what touches the log. The consumer is called from one thread at a time
(``_calls``): a batch is taken (``consume`` serves rebalances, on that
thread), exported, then its next offsets are committed per partition
before the next ``consume``, so while the cluster answers, a partition is
only revoked with everything taken from it exported and committed. A record that does not
decode is counted, named in the log, and committed past: it never stalls
the group.

A landing (``exporters.api.PartitionedExporter``: the Iceberg landing) keeps
its positions in its table, not in the group: on assignment the host asks
it where each partition resumes and seeks there (a recreated topic starts
at its first offset, whatever the group committed for the old one); before
a revocation it has the landing commit what it took of them; the group's
offsets follow the landing's durable offsets (what ``kip714 log status``
shows), never what was only exported; a landing that dropped a generation
(a failed or fenced commit) has every assigned partition fed again from
where its table stands. Its calls run on the event loop while the
consumer's thread waits for them (bounded), inside ``consume``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Final, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from exporters.api import PartitionedExporter
from exporters.iceberg.settings import DEFAULT_NAMESPACE
from telemetry.cluster.topics import topic_identity
from telemetry.ingest.kafka_log import decode_record
from telemetry.ingest.record import FrameError
from telemetry.server.exporter_host import ExporterHost
from telemetry.server.loop_calls import wait_on_loop

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from exporters.api import Exporter, LoggedPush
    from telemetry.ingest.config import LogConfig
    from telemetry.server.config import ExporterSettings

__all__ = ["SESSION_TIMEOUT_MS", "KafkaExporterHost", "group_id"]

_log = logging.getLogger(__name__)

#: A lost node's partitions move to the group's other members after this (classic protocol).
SESSION_TIMEOUT_MS: Final = 10_000
#: How long one ``consume`` waits for records: the bound on noticing a stop while idle.
_CONSUME_WAIT_S: Final = 0.5
_COMMITTED_TIMEOUT_S: Final = 10.0
#: How long the consumer's thread waits for one landing call (a commit of the open
#: generation takes seconds; a catalog away is retried by the assignment).
_LANDING_CALL_TIMEOUT_S: Final = 60.0
#: Backoff of the assignment while the landing cannot read its table: first, longest.
_ASSIGN_RETRY_S: Final = (0.5, 10.0)

_T = TypeVar("_T")


def group_id(settings: ExporterSettings) -> str:
    """``kip714-<exporter name>-<namespace>``: the lake's namespace, for every exporter type."""
    namespace = settings.options.get("namespace", DEFAULT_NAMESPACE)
    return (
        f"kip714-{settings.name}-{namespace if isinstance(namespace, str) else DEFAULT_NAMESPACE}"
    )


class KafkaExporterHost(ExporterHost):
    """Runs one exporter as a member of its consumer group on the pushes topic."""

    def __init__(
        self,
        settings: ExporterSettings,
        exporter: Exporter,
        log: LogConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._init_host(settings, exporter, clock)
        assert log.cluster is not None  # parse_log sets it for store = "kafka"
        self.topic = log.topic
        self.group = group_id(settings)
        self._client_config: dict[str, Any] = {
            **log.cluster.client_config(),
            "group.id": self.group,
            "group.protocol": "classic",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
        self._consumer: Consumer | None = None
        #: One consumer call at a time: the task's thread, or the stop's.
        self._calls = threading.Lock()
        #: Taken from the consumer, not yet exported (a failed export retries it).
        self._batch: list[LoggedPush] = []
        #: Undecodable records taken with ``_batch``: the next offset past them per partition,
        #: committed only once the batch is exported (a push before them must not be skipped).
        self._skipped: dict[int, int] = {}
        #: Exported (or skipped), not yet committed: the next offset per partition.
        self._to_commit: dict[int, int] = {}
        #: The next offset to export per assigned partition (committed, or taken and skipped).
        self.positions: dict[int, int] = {}
        #: Records not yet exported per assigned partition (the end as last fetched minus
        #: ``positions``); read by /metrics and ``kip714 log status``.
        self.lags: dict[int, int] = {}
        #: Records of the topic that do not decode, skipped (counted, named in the log).
        self.undecodable = 0
        #: The exporter, when it keeps its positions per partition itself (the landing).
        self._landing = exporter if isinstance(exporter, PartitionedExporter) else None
        #: A landing's durable offsets as last committed to the group, per partition.
        self._group_committed: dict[int, int] = {}
        #: The landing asked for a replay: every assigned partition is sought again.
        self._reseek = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cluster = log.cluster
        self._startup_timeout_s = log.cluster.startup_timeout_s
        #: The most a record decodes to: what any node appends (``max_record_bytes``).
        self._max_record_bytes = log.max_record_bytes

    @property
    def lag(self) -> int:
        return sum(self.lags.values())

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._landing is not None:
            cluster_id, topic_id = await asyncio.to_thread(
                topic_identity, self._cluster, self.topic, self._startup_timeout_s
            )
            self._landing.bind_topic(cluster_id, self.topic, topic_id)
        await self.exporter.start()
        self._started = True
        client_log = _ClientLogger(self.name)
        consumer = Consumer(
            {**self._client_config, "logger": client_log, "error_cb": client_log.error}
        )
        consumer.subscribe(
            [self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )
        self._consumer = consumer
        self._progress_at = self._clock()
        self._task = asyncio.create_task(self._run(), name=f"exporter-{self.name}")
        self._task.add_done_callback(self._task_done)

    # -- the feeding loop (ExporterHost._run calls _step) -------------------------------------

    async def _step(self) -> bool:
        """Take a batch (unless one waits for a retry), export it, commit what is exported.

        ``consume`` comes first in every step that holds no batch, even while
        commits fail: the consumer rejoins its group only when polled (after
        the coordinator moved or restarted), and a commit cannot succeed
        before. A partition revoked meanwhile drops its uncommitted offsets:
        its new owner exports those pushes again (at least once).
        """
        if not self._batch:
            self._doing = f"reading {self.topic} as group {self.group}"
            self._batch, self._skipped = await asyncio.to_thread(self._take)
        batch = self._batch
        if batch:
            self._doing = f"exporting {len(batch)} pushes of {self.topic}"
            await self._export(batch)
            self._batch = []
        self._note_commits(batch)
        if self._to_commit:
            await self._commit_exported()
        if batch:
            return True
        if self._stopping.is_set():
            return False
        if self.lag == 0:
            self._progress_at = self._clock()  # caught up: nothing can be stalled
        return True

    def _note_commits(self, exported: list[LoggedPush]) -> None:
        """What to commit to the group: past ``exported`` and skipped records, or what a
        landing's table holds (undecodable records are then skipped again by a new owner)."""
        skipped, self._skipped = self._skipped, {}
        if self._landing is not None:
            for partition, offset in self._landing.durable_offsets().items():
                if offset > self._group_committed.get(partition, -1):
                    self._to_commit[partition] = offset
            return
        for push in exported:
            self._to_commit[push.partition] = push.offset + 1
        for partition, offset in skipped.items():  # past undecodable records
            self._to_commit[partition] = max(self._to_commit.get(partition, 0), offset)

    def _rewind(self) -> bool:
        """After a landing dropped a generation: seek every partition to where its table stands.

        What was taken and not exported is dropped; a seek that fails is
        tried again before the next batch.
        """
        landing = self._landing
        if landing is None:
            return False
        if landing.take_replay() is not None:
            self._reseek = True
        if not self._reseek:
            return False
        self._batch, self._skipped = [], {}
        with self._calls:
            consumer = self._consumer
            if consumer is None:
                return False
            for partition, offset in landing.resume_offsets().items():
                at = OFFSET_BEGINNING if offset is None else offset
                consumer.seek(TopicPartition(self.topic, partition, at))
                if offset is not None:
                    self.positions[partition] = offset
        self._reseek = False
        return True

    async def _commit_exported(self) -> None:
        offsets = dict(self._to_commit)
        self._doing = f"committing offsets {offsets} of {self.topic}"
        await asyncio.to_thread(self._commit_offsets, offsets)
        for partition, offset in offsets.items():
            if self._to_commit.get(partition) == offset:
                del self._to_commit[partition]
        self._progress_at = self._clock()

    async def _final_commit(self) -> None:
        try:
            if self._to_commit:
                await self._commit_exported()
        except Exception as error:
            _log.warning("exporter %s could not commit its final offsets: %s", self.name, error)
        await asyncio.to_thread(self._close_consumer)
        _log.info(
            "exporter %s left group %s at offsets %s of %s",
            self.name,
            self.group,
            dict(sorted(self.positions.items())),
            self.topic,
        )

    # -- on the consumer's thread -------------------------------------------------------------

    def _take(self) -> tuple[list[LoggedPush], dict[int, int]]:
        """Decoded pushes (waiting up to ``_CONSUME_WAIT_S``), and past what undecodable ones."""
        with self._calls:
            consumer = self._consumer
            if consumer is None:
                return [], {}
            messages = consumer.consume(self.settings.batch_max_records, _CONSUME_WAIT_S)
            batch: list[LoggedPush] = []
            skipped: dict[int, int] = {}
            for message in messages:
                push = self._decoded(message, skipped)
                if push is not None:
                    batch.append(push)
            self._refresh_lags(consumer)
            return batch, skipped

    def _decoded(self, message: Message, skipped: dict[int, int]) -> LoggedPush | None:
        error = message.error()
        partition, offset = message.partition(), message.offset()
        if partition is None or offset is None:
            return None
        if error is not None:
            _log.warning(
                "exporter %s: %s partition %d: %s", self.name, self.topic, partition, error
            )
            return None
        self.positions[partition] = offset + 1
        try:
            return decode_record(message.value(), partition, offset, self._max_record_bytes)
        except FrameError as failure:
            self.undecodable += 1
            skipped[partition] = offset + 1
            _log.error(
                "exporter %s: skipping %s partition %d offset %d, it does not decode: %s",
                self.name,
                self.topic,
                partition,
                offset,
                failure.reason,
            )
            return None

    def _commit_offsets(self, offsets: dict[int, int]) -> None:
        with self._calls:
            consumer = self._consumer
            if consumer is None or not offsets:
                return
            consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())],
                asynchronous=False,
            )
            self._group_committed.update(offsets)
            self._refresh_lags(consumer)

    def _refresh_lags(self, consumer: Consumer) -> None:
        """Lag per assigned partition from the end as last fetched (cached: no request).

        A landing's lag is what its table does not hold yet (``durable_offsets``;
        a partition it holds none of counts from its first offset), not what
        was taken: the open generation is not durable, as with the local log.
        """
        durable = dict(self._landing.durable_offsets()) if self._landing is not None else None
        for partition, taken in list(self.positions.items()):
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), cached=True
                )
            except KafkaException:
                continue
            position = taken if durable is None else durable.get(partition, max(0, int(low)))
            if high >= 0:
                self.lags[partition] = max(0, int(high) - position)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Rebalance (inside ``consume``): where each new partition resumes, for lag and logs."""
        if self._landing is not None:
            self._assign_landing(consumer, partitions)
            return
        try:
            committed = consumer.committed(partitions, timeout=_COMMITTED_TIMEOUT_S)
        except KafkaException as error:
            _log.warning(
                "exporter %s: no committed offsets for its partitions: %s", self.name, error
            )
            committed = partitions
        for partition in committed:
            offset = partition.offset
            if offset < 0:  # nothing committed yet: the partition's start
                try:
                    offset, _ = consumer.get_watermark_offsets(partition, timeout=5.0)
                except KafkaException:
                    offset = 0
            self.positions[partition.partition] = int(offset)
        _log.info(
            "exporter %s: group %s assigned partitions %s of %s",
            self.name,
            self.group,
            sorted(p.partition for p in partitions),
            self.topic,
        )

    def _assign_landing(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Resume each partition where the landing's table stands (retried while it cannot read).

        Until the landing answers, the partitions are assigned paused: no
        record of them is taken at a position the table does not confirm.
        """
        landing = self._landing
        assert landing is not None
        numbers = [p.partition for p in partitions]
        delay, longest = _ASSIGN_RETRY_S
        while True:
            try:
                offsets = self._on_loop(lambda: landing.assign(numbers))
                break
            except Exception as error:
                if self._stopping.is_set() or self._loop is None or self._loop.is_closed():
                    consumer.assign(partitions)
                    consumer.pause(partitions)
                    return
                _log.warning(
                    "exporter %s: cannot take partitions %s of %s over yet (%s); retrying",
                    self.name,
                    numbers,
                    self.topic,
                    error,
                )
                time.sleep(delay)
                delay = min(delay * 2, longest)
        for partition in partitions:
            offset = offsets.get(partition.partition)
            partition.offset = OFFSET_BEGINNING if offset is None else offset
            self.positions[partition.partition] = 0 if offset is None else offset
            if offset is not None:
                self._group_committed[partition.partition] = offset
        consumer.assign(partitions)
        _log.info(
            "exporter %s: group %s assigned partitions %s of %s, resuming where the table "
            "stands: %s",
            self.name,
            self.group,
            numbers,
            self.topic,
            {p: "start" if o is None else o for p, o in sorted(offsets.items())},
        )

    def _revoke_landing(
        self, consumer: Consumer, partitions: list[TopicPartition], lost: bool
    ) -> None:
        """Have the landing commit what it took of ``partitions``, then the group its offsets.

        Partitions *lost* (this member's session expired) belong to another
        member already: their offsets are not committed to the group (the
        landing's table fences a late commit anyway).
        """
        landing = self._landing
        assert landing is not None
        numbers = [p.partition for p in partitions]
        try:
            durable = self._on_loop(lambda: landing.revoke(numbers))
        except Exception as error:
            _log.warning(
                "exporter %s: partitions %s of %s revoked before the landing committed them "
                "(%s); their next owner resumes where the table stands",
                self.name,
                numbers,
                self.topic,
                error,
            )
            return
        if lost or not durable:
            return
        try:
            consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(durable.items())],
                asynchronous=False,
            )
        except KafkaException as error:
            _log.warning(
                "exporter %s: committing offsets %s of %s on revocation: %s",
                self.name,
                durable,
                self.topic,
                error,
            )

    def _on_loop(self, call: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run ``call()`` on the event loop; wait here (bounded): see ``loop_calls``."""
        return wait_on_loop(self._loop, call, _LANDING_CALL_TIMEOUT_S)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._landing is not None:
            self._revoke_landing(consumer, partitions, lost=True)
        self._forget(partitions)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Everything taken was exported and committed before this ``consume``: just forget.

        A landing commits what it took of them first (``_revoke_landing``).
        """
        if self._landing is not None:
            self._revoke_landing(consumer, partitions, lost=False)
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for partition in partitions:
            self.positions.pop(partition.partition, None)
            self.lags.pop(partition.partition, None)
            self._to_commit.pop(partition.partition, None)
            self._group_committed.pop(partition.partition, None)

    def _close_consumer(self) -> None:
        """Leave the group at once (its partitions move now, not after the session timeout)."""
        with self._calls:
            consumer, self._consumer = self._consumer, None
            if consumer is None:
                return
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as error:
                _log.warning("exporter %s: closing its consumer: %s", self.name, error)


class _ClientLogger:
    """librdkafka's log lines of an exporter's consumer, at most warnings (it retries)."""

    def __init__(self, exporter: str) -> None:
        self._logger = logging.getLogger(f"telemetry.server.kafka_exporter_host.{exporter}")

    def log(self, level: int, message: str, *args: object) -> None:
        self._logger.log(min(level, logging.WARNING), message, *args)

    def error(self, error: KafkaError) -> None:
        self._logger.warning("consumer: %s", error)
