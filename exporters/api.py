"""The exporter plugin interface: what kip714 hands a plugin, and what it expects back.

Third-party plugins import this module, so it depends on the standard library
only and changes only with a new major version.

How records reach an exporter:

* kip714 appends every accepted push to its durable ingest log before the
  client is acknowledged. Each configured exporter consumes that log from its
  own committed position, so a slow or failing exporter never slows
  acknowledgements or the other exporters.
* Delivery is **at least once, in log order** (per partition when the log
  is a Kafka topic, ``[log] store = "kafka"``: one client instance's pushes
  stay on one partition, and positions are committed per partition). The host commits an exporter's
  position only after ``export`` returns; a crash or restart between the two
  replays the batch. An exporter that needs exactly-once output deduplicates
  by ``LoggedPush.offset``, which is unique per push within one ingest log
  and strictly increasing. A log whose directory is deleted starts again at
  offset 0 under a new id; an exporter that keeps offsets in its own sink
  implements ``LogBoundExporter`` to learn that id before it starts.
* A batch is valid only for the duration of the ``export`` call. The host may
  reuse the sequence afterwards; copy what you keep (the records themselves are
  immutable and may be retained).

Rules for implementations:

1. The factory (usually the class itself) is cheap and free of side effects:
   open files and connections in ``start``.
2. Coroutines must not block the event loop; run blocking work through
   ``asyncio.to_thread``.
3. Raise ``TransientExportError`` for failures worth retrying (the host retries
   the same batch with backoff) and ``PermanentExportError`` for data the
   exporter can never accept (the host reports it and moves on). Any other
   exception is treated as transient.
4. ``flush`` makes everything passed to ``export`` so far durable or
   delivered, as far as the sink allows; the host calls it before shutdown.
5. ``close`` is idempotent and safe to call without a prior ``start`` or
   ``export``.

Errors::

    ExportError (retryable: bool)
     ├── TransientExportError   retryable = True
     └── PermanentExportError   retryable = False
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "BufferingExporter",
    "ExportError",
    "Exporter",
    "ExporterFactory",
    "LogBoundExporter",
    "LoggedPush",
    "PartitionedExporter",
    "PermanentExportError",
    "TransientExportError",
]


@dataclass(frozen=True, slots=True)
class LoggedPush:
    """One accepted PushTelemetry request as it is stored in the ingest log.

    Plain data rather than protobuf objects, so plugins need no protobuf
    runtime; ``payload`` is the decompressed OTLP ``MetricsData`` encoding,
    which an exporter decodes only if it needs data points.

    Attributes:
        offset: The push's log position. Unique per push within one ingest
            log and strictly increasing in log order (gaps are possible, never
            reuse); use it as an idempotency key, together with the log's id
            (``LogBoundExporter``) if it outlives the log.
        client_instance_id: Kafka's 22-character URL-safe base64 form of the
            client instance UUID (``Uuid.toString()``).
        subscription_id: The subscription id the client pushed against
            (a signed 32-bit value in Kafka).
        client_id: The request header's client id, ``None`` when absent.
        client_software_name: From ApiVersions, ``None`` when unknown.
        client_software_version: From ApiVersions, ``None`` when unknown.
        client_source_address: The peer IP address as text.
        client_source_port: The peer TCP port.
        principal: The authenticated principal (``User:alice``), if any.
        received_time_ms: Wall-clock milliseconds since the Unix epoch at
            which the server accepted the push.
        push_interval_ms: The push interval the client was told to use.
        terminating: ``True`` for the client's final push before it closes.
        content_type: The payload format; ``"OTLP"`` for KIP-714 pushes.
        payload: The decompressed OTLP ``MetricsData`` bytes. A forwarded
            push's resources carry ``kafka.broker.id`` and
            ``kafka.broker.listener`` (added when the log is read).
        broker_id: The Kafka broker a push was forwarded through (the
            forward route), ``None`` for a push kip714 took itself.
        broker_listener: That broker's listener name, ``None`` if unknown.
        partition: The partition of the log the push is in: always 0 for
            the local log; with ``[log] store = "kafka"`` the pushes topic's
            partition, and ``offset`` is the Kafka offset within it (unique
            per topic id and partition, increasing within a partition).
        received_bytes: The payload's size as the client sent it
            (compressed): what the ``push_byte_rate`` quota counts. ``None``
            when unknown (a record an early version logged).
        decoded_bytes: The payload's size decompressed, before any broker
            attributes were added: what ``push_decoded_byte_rate`` counts.
            ``None`` when unknown (a push not read from the ingest log).
    """

    offset: int
    client_instance_id: str
    subscription_id: int
    client_id: str | None
    client_software_name: str | None
    client_software_version: str | None
    client_source_address: str | None
    client_source_port: int | None
    principal: str | None
    received_time_ms: int
    push_interval_ms: int
    terminating: bool
    content_type: str
    payload: bytes
    broker_id: int | None = None
    broker_listener: str | None = None
    partition: int = 0
    received_bytes: int | None = None
    decoded_bytes: int | None = None


@runtime_checkable
class Exporter(Protocol):
    """A sink fed from the ingest log; see the module docstring for the contract."""

    async def start(self) -> None:
        """Acquire resources (files, connections); called once before ``export``."""

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        """Take a non-empty batch, in log order; return only when it is handled.

        Returning commits the batch: it is not offered again unless the
        process stops before the host has durably recorded the commit.

        Raises:
            TransientExportError: The batch should be retried later.
            PermanentExportError: The batch can never be accepted.
        """

    async def flush(self) -> None:
        """Push out anything buffered by earlier ``export`` calls."""

    async def close(self) -> None:
        """Flush and release resources. Idempotent; valid without ``start``."""


@runtime_checkable
class BufferingExporter(Exporter, Protocol):
    """An exporter that accepts batches before they are durable in its sink.

    Returning from ``export`` normally lets the host commit the batch. An
    exporter that buffers (the landing gathers rows into large files)
    implements ``durable_offset`` instead: the host never commits past it, and
    after a restart replays from there. Such an exporter must recognise pushes
    it already made durable (by ``offset``) and skip them, which together
    gives exactly-once output.
    """

    def durable_offset(self) -> int:
        """The next offset not yet durable: every push before it is safely in the sink."""
        ...


@runtime_checkable
class LogBoundExporter(Exporter, Protocol):
    """An exporter that is told which ingest log feeds it, before it starts.

    Offsets identify a push only within one log: if the log's directory is
    lost, the new log starts again at offset 0. An exporter that remembers
    offsets in its sink (to skip replays) implements ``bind_log``; the host
    calls it once, before ``start``, with the log's id, so ``start`` can
    compare it with the id the sink recorded and refuse, rather than skip or
    overwrite data, when they differ. Hosts that predate this method never
    call it; an implementation then behaves as if the id were unknown.
    """

    def bind_log(self, log_id: str, /) -> None:
        """Record the id (a UUID string) of the log that feeds this exporter."""
        ...


@runtime_checkable
class PartitionedExporter(BufferingExporter, Protocol):
    """A buffering exporter that keeps its position per partition in its own sink.

    With ``[log] store = "kafka"`` a consumer group feeds it, and a
    partition moves between nodes on every rebalance: the host asks the
    exporter, not the group, where a partition resumes (the group's offsets
    trail the sink and a recreated topic restarts below them). Hosts that
    feed it:

    * call ``bind_topic`` once, before ``start``, with the topic's identity
      (a recreated topic has a new id, so its offsets start again);
    * on every assignment, await ``assign`` and resume each partition where
      it says (``None``: the partition's first offset);
    * before a partition is revoked, await ``revoke`` (it makes durable what
      it took from them) and commit ``durable_offsets()`` to the group;
    * commit ``durable_offsets()`` to the group as they advance;
    * when ``take_replay()`` returns a value, drop what they hold and seek
      every assigned partition to ``resume_offsets()``.

    ``LoggedPush.offset`` is then the Kafka offset within
    ``LoggedPush.partition``.
    """

    def bind_topic(self, cluster_id: str, topic: str, topic_id: str, /) -> None:
        """Record the pushes topic's identity; ``ValueError`` for a setting it cannot serve."""
        ...

    async def assign(self, partitions: Sequence[int], /) -> Mapping[int, int | None]:
        """Take ``partitions`` over: where each resumes (read again from the sink)."""
        ...

    async def revoke(self, partitions: Sequence[int], /) -> Mapping[int, int]:
        """Give ``partitions`` up: make what was taken durable, forget them; their offsets."""
        ...

    def durable_offsets(self) -> Mapping[int, int]:
        """Per assigned partition, the next offset not yet durable in the sink."""
        ...

    def resume_offsets(self) -> Mapping[int, int | None]:
        """Per assigned partition, where feeding resumes after a replay (``None``: its start)."""
        ...

    def take_replay(self) -> int | None:
        """Once after a failure: not ``None`` when the host must seek to ``resume_offsets()``."""
        ...


class ExporterFactory(Protocol):
    """The object an entry point in the ``kip714.exporters`` group names.

    Usually the exporter class itself. ``config`` holds the exporter's
    ``options`` table from the configuration file; a factory raises
    ``TypeError`` or ``ValueError`` for unknown or invalid keys, which the
    registry reports with the exporter's name.
    """

    def __call__(self, config: Mapping[str, Any], /) -> Exporter: ...


class ExportError(Exception):
    """An exporter could not take a batch.

    ``retryable`` tells the host whether offering the same batch again can
    succeed. The subclasses set it, so plugins usually raise a class rather
    than pass a flag; ``retryable=`` overrides it for one instance.
    """

    retryable: bool = True

    def __init__(self, *args: object, retryable: bool | None = None) -> None:
        super().__init__(*args)
        if retryable is not None:
            self.retryable = retryable


class TransientExportError(ExportError):
    """The sink is unavailable or overloaded; the same batch may succeed later."""

    retryable = True


class PermanentExportError(ExportError):
    """The batch can never be accepted (bad data, rejected by the sink)."""

    retryable = False
