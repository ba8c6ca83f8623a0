"""The metadata store in a compacted Kafka topic, shared by every node that names it.

As Kafka Connect's config topic and Schema Registry's ``_schemas`` do: one
partition, so the topic orders every change of every node; compaction keeps
the last message per key (``entities.py``); each node reads the topic from
the start and applies every message in order, so all nodes hold the same
image once they have read the same offset.

Two librdkafka clients run on their own threads:

* a consumer assigned to partition 0 (no group, nothing committed), polled
  by one thread of this class, which applies each message and tells the
  watchers (the admin plane hands that to the event loop with
  ``call_soon_threadsafe``);
* an idempotent producer with ``acks=all``: :meth:`append` produces one
  message per entity, waits for the cluster to acknowledge them, then for
  the consumer thread to have applied them, so the caller's answer reflects
  its own change (and anything ordered after it).

Blocking like :class:`~telemetry.metastore.store.MetadataStore`: the plane
calls it in worker threads. :meth:`close` wakes every waiting append, which
then fails with :class:`MetadataStoreClosedError`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from telemetry.metastore.backend import MetadataLogStats
from telemetry.metastore.entities import Entity, messages_for, read_message, replacing
from telemetry.metastore.image import MetadataImage
from telemetry.metastore.kafka_topic import (
    PARTITION,
    ClientLog,
    MetadataLogTimeoutError,
    client_log,
    ensure_topic,
)
from telemetry.metastore.store import MetadataStoreClosedError, MetadataStoreFailedError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from telemetry.metastore.backend import StateCheck
    from telemetry.metastore.records import MetadataRecord
    from telemetry.metastore.settings import MetaSettings

__all__ = ["KafkaMetadataLog", "MetadataLogStats"]

_log = logging.getLogger(__name__)

#: How long a change may wait for the cluster (librdkafka's ``message.timeout.ms``):
#: long enough to ride out a broker restart or a leader election.
DELIVERY_TIMEOUT_MS: Final = 30_000
#: The consumer's long poll at the broker: a change made on another node
#: arrives here within about this long (the ``≤ 1 s`` promise in docs/admin.md).
FETCH_WAIT_MAX_MS: Final = 100
_POLL_S: Final = 0.1
#: Messages applied with one copy of the image (a start reads the topic in such batches).
_BATCH: Final = 1000
_CLOSE_FLUSH_S: Final = 5.0
_JOIN_S: Final = 10.0


class _Pending:
    """The delivery reports of one append's messages."""

    def __init__(self, count: int, changed: threading.Condition) -> None:
        self.remaining = count
        self.offsets: list[int] = []
        self.errors: list[str] = []
        self._changed = changed

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        """librdkafka's delivery callback, on whichever thread served it."""
        with self._changed:
            self.remaining -= 1
            if error is not None:
                self.errors.append(str(error))
            else:
                self.offsets.append(_offset(message))
            self._changed.notify_all()


class KafkaMetadataLog:
    """The shared metadata image: open with :meth:`open`, then append and watch."""

    def __init__(
        self, settings: MetaSettings, client_log: ClientLog, check: StateCheck | None = None
    ) -> None:
        self._settings = settings
        self._client_log = client_log
        self._check = check
        self._topic = settings.topic
        self._image = MetadataImage()
        self.stats = MetadataLogStats()
        self._changed = threading.Condition()
        self._append_lock = threading.Lock()
        self._watchers: list[Callable[[], None]] = []
        self._stopping = threading.Event()
        self._closed = False
        self._interrupted = False
        self._failure: str | None = None
        self._thread: threading.Thread | None = None
        common: dict[str, Any] = {**settings.client_config(), **client_log.callbacks()}
        self._consumer = Consumer(
            {
                **common,
                # Required by librdkafka; never joined (assign) and nothing is committed.
                "group.id": f"kip714-meta-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
            }
        )
        self._producer = Producer(
            {
                **common,
                "acks": "all",
                # Ordered, without duplicates, across retries and a broker restart.
                "enable.idempotence": True,
                "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                "linger.ms": 0,
            }
        )

    @classmethod
    def open(cls, settings: MetaSettings, check: StateCheck | None = None) -> KafkaMetadataLog:
        """Create the topic if missing, read it to its end, then follow it.

        ``check`` (the admin plane's rules) judges every message's state; a
        message it refuses is skipped like one that cannot be decoded.

        Raises:
            MetadataLogTimeoutError: not done within ``settings.startup_timeout_s``.
            MetadataStoreError: the topic exists with more than one partition.
        """
        deadline = time.monotonic() + settings.startup_timeout_s
        log_of_clients = client_log()
        ensure_topic(settings, log_of_clients, deadline)
        log = cls(settings, log_of_clients, check)
        try:
            log._catch_up(deadline)
        except BaseException:
            log._release_clients()
            raise
        log_of_clients.opened = True
        log._thread = threading.Thread(target=log._follow, name="kip714-metadata-log", daemon=True)
        log._thread.start()
        _log.info(
            "metadata log %s read to offset %d: %d subscriptions, %d quota entities, "
            "%d SCRAM credentials",
            log.location,
            log.stats.position,
            len(log.image.client_metrics),
            len(log.image.client_quotas),
            len(log.image.scram_credentials),
        )
        return log

    # -- the MetadataBackend interface ------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def next_offset(self) -> int:
        return self.stats.position

    @property
    def location(self) -> str:
        return f"topic {self._topic} at {self._settings.bootstrap_servers}"

    def watch(self, callback: Callable[[], None]) -> None:
        self._watchers.append(callback)

    def append(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Produce one message per entity, then wait until the cluster and this node have them.

        Raises:
            MetadataStoreClosedError: closed before (or while) the change was confirmed.
            MetadataStoreFailedError: the cluster refused it, or this node stopped following.
            MetadataLogTimeoutError: not confirmed in time (it may still apply).
        """
        batch = tuple(records)
        with self._append_lock:
            self._check_usable()
            if not batch:
                return self._image
            messages = messages_for(self._image, batch)
            pending = _Pending(len(messages), self._changed)
            try:
                for key, value in messages:
                    self._producer.produce(
                        self._topic,
                        key=key,
                        value=value,
                        partition=PARTITION,
                        on_delivery=pending.delivered,
                    )
            except (BufferError, KafkaException) as error:
                raise MetadataStoreFailedError(
                    f"cannot produce to {self.location}: {error}"
                ) from None
            deadline = time.monotonic() + DELIVERY_TIMEOUT_MS / 1000 + _CLOSE_FLUSH_S
            self._await_delivery(pending, deadline)
            with self._changed:
                if pending.errors:
                    raise MetadataStoreFailedError(
                        f"{self.location} did not take the change: {'; '.join(pending.errors)}"
                    )
                end = max(pending.offsets) + 1
                self._wait(lambda: self.stats.position >= end, deadline, "applied on this node")
                return self._image

    def interrupt(self) -> None:
        """Fail waiting and later appends at once; keep following until :meth:`close`."""
        with self._changed:
            self._interrupted = True
            self._changed.notify_all()

    def close(self) -> None:
        """Stop following, wake waiting appends, close the clients; idempotent.

        Messages already produced get a few seconds to reach the cluster.
        """
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._stopping.set()
            self._changed.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(_JOIN_S)
            if thread.is_alive():
                _log.error("the metadata log's consumer thread did not stop within %.0f s", _JOIN_S)
                return  # the clients are still in use: leave them to the process exit
        self._release_clients()

    # -- internals --------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed or self._interrupted:
            raise MetadataStoreClosedError(
                f"metadata log {self.location} is closed: the server is stopping"
            )
        if self._client_log.fatal is not None:
            raise MetadataStoreFailedError(
                f"metadata log producer failed: {self._client_log.fatal}"
            )
        if self._failure is not None:
            raise MetadataStoreFailedError(
                f"this node stopped following {self.location}: {self._failure}"
            )

    def _await_delivery(self, pending: _Pending, deadline: float) -> None:
        """Serve delivery reports on this thread (no poll interval) until all are in.

        Checks between short polls, so :meth:`close` ends the wait within one.
        """
        while True:
            with self._changed:
                if pending.remaining == 0:
                    return
                self._check_usable()
                if time.monotonic() >= deadline:
                    raise self._timed_out("acknowledged by the cluster")
            self._producer.poll(_POLL_S / 2)

    def _wait(self, done: Callable[[], bool], deadline: float, what: str) -> None:
        """Wait (holding ``_changed``) for ``done``, a close or failure, or ``deadline``."""
        while not done():
            self._check_usable()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timed_out(what)
            self._changed.wait(min(remaining, 1.0))

    def _timed_out(self, what: str) -> MetadataLogTimeoutError:
        return MetadataLogTimeoutError(
            f"the change was not {what} in time ({self.location}); it may still apply"
        )

    def _catch_up(self, deadline: float) -> None:
        """Apply every message up to the partition's end as of now."""
        partition = TopicPartition(self._topic, PARTITION, OFFSET_BEGINNING)
        self._consumer.assign([partition])
        end = self._end_offset(deadline)
        while self.stats.position < end:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MetadataLogTimeoutError(
                    f"read {self.stats.position} of {end} offsets of {self.location} "
                    f"within {self._settings.startup_timeout_s:g} s"
                )
            self._apply(self._next_batch(min(_POLL_S, remaining)))

    def _end_offset(self, deadline: float) -> int:
        partition = TopicPartition(self._topic, PARTITION)
        last_error: object = "no answer"
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                _, high = self._consumer.get_watermark_offsets(partition, timeout=remaining)
            except KafkaException as error:
                last_error = error.args[0] if error.args else error
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
                continue
            self.stats.high_watermark = int(high)
            return int(high)
        raise MetadataLogTimeoutError(
            f"no end offset for {self.location} within "
            f"{self._settings.startup_timeout_s:g} s: {last_error}"
        )

    def _follow(self) -> None:
        """The consumer thread: apply what arrives until :meth:`close`."""
        try:
            while not self._stopping.is_set():
                self._producer.poll(0)  # the producer's logs and errors, delivery reports
                self._apply(self._next_batch(_POLL_S))
        except Exception as error:
            _log.exception("the metadata log's consumer thread failed: this node stops following")
            with self._changed:
                self._failure = f"{type(error).__name__}: {error}"
                self._changed.notify_all()

    def _next_batch(self, timeout_s: float) -> list[Message]:
        """The next message (waiting up to ``timeout_s``) and what is already fetched after it."""
        first = self._consumer.poll(timeout_s)
        if first is None:
            return []
        return [first, *self._consumer.consume(_BATCH - 1, 0)]

    def _apply(self, messages: list[Message]) -> None:
        """Apply a batch of messages in order, with one new image for the batch.

        Each message replaces its entity's whole state, so within a batch only
        the last message of each entity counts, and entities do not interact:
        the image is copied once per batch, not once per message.
        """
        states: dict[Entity, tuple[MetadataRecord, ...]] = {}
        position = self.stats.position
        timestamp_ms = applied = 0
        for message in messages:
            error = message.error()
            if error is None:
                entity, state, valid = self._decode(message)
                if entity is not None:
                    states.pop(entity, None)  # keep the order of the last writes
                    states[entity] = state
                    timestamp_ms = message.timestamp()[1]
                    applied += valid
                position = _offset(message) + 1
            elif error.code() == KafkaError._PARTITION_EOF:
                # Compaction leaves gaps: the end, not the last message, is the position.
                position = max(position, _offset(message))
            elif self._client_log.opened:
                _log.warning("metadata log %s: %s", self.location, error)
        if position == self.stats.position and not states:
            return
        image = self._replaced(self._image, states) if states else self._image
        with self._changed:
            self._image = image
            self.stats.position = position
            self.stats.high_watermark = max(self.stats.high_watermark, position)
            self.stats.applied_records += applied
            if timestamp_ms > 0:
                self.stats.last_apply_delay_s = max(0.0, time.time() - timestamp_ms / 1000)
            self._changed.notify_all()
        if not states or not self._client_log.opened:
            return
        self._refresh_high_watermark()
        for watcher in self._watchers:
            try:
                watcher()
            except Exception:
                _log.exception("a metadata log watcher failed")

    def _replaced(
        self, image: MetadataImage, states: dict[Entity, tuple[MetadataRecord, ...]]
    ) -> MetadataImage:
        """``image`` with each entity's state replaced; an entity that fails alone is skipped.

        ``_decode`` has already tried every state on an empty image, so the
        one-by-one path is a guard: no message may stop this node following.
        """
        try:
            return image.apply(
                record
                for entity, state in states.items()
                for record in replacing(image, entity, state)
            )
        except Exception:  # narrowed down below, entity by entity
            pass
        for entity, state in states.items():
            try:
                image = image.apply(replacing(image, entity, state))
            except Exception as error:  # whatever it is, the record is skipped
                _log.error(
                    "metadata log %s: skipping the state of %s: %s",
                    self.location,
                    entity,
                    _describe(error),
                )
                self.stats.skipped_records += 1
        return image

    def _decode(self, message: Message) -> tuple[Entity | None, tuple[MetadataRecord, ...], bool]:
        """The entity (None: the key is unreadable), its new state, and whether it is valid.

        A message that fails (``entities.read_message``: a damaged frame, a key
        nested too deep to parse, a NaN quota, ``interval.ms = -5``) is logged
        and counted, and this node goes on following.
        """
        entity, state, error = read_message(message.key() or b"", message.value(), self._check)
        if error is None:
            return entity, state, True
        # Every node skips the same message, so they still agree.
        _log.error(
            "metadata log %s: skipping offset %d: %s",
            self.location,
            _offset(message),
            _describe(error),
        )
        self.stats.skipped_records += 1
        return entity, (), False

    def _refresh_high_watermark(self) -> None:
        """The end as of the last fetch response (cached: no request)."""
        with contextlib.suppress(KafkaException):
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(self._topic, PARTITION), cached=True
            )
            if high >= 0:
                self.stats.high_watermark = max(self.stats.high_watermark, int(high))

    def _release_clients(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as error:
            _log.warning("closing the metadata log consumer: %s", error)
        left = self._producer.flush(_CLOSE_FLUSH_S)
        if left:
            _log.warning(
                "metadata log %s: %d produced messages were not confirmed before close",
                self.location,
                left,
            )


def _describe(error: Exception) -> str:
    """One bounded line: a record's text may be as long as the record."""
    text = str(error)
    if len(text) > 300:
        text = text[:300] + "..."
    return f"{type(error).__name__}: {text}"


def _offset(message: Message) -> int:
    offset = message.offset()
    assert offset is not None  # set on every consumed message and delivery report
    return offset
