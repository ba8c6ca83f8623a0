"""What the admin plane needs of a metadata store, local file or Kafka topic alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from telemetry.metastore.image import MetadataImage
    from telemetry.metastore.records import MetadataRecord


class MetadataBackend(Protocol):
    """A durable image of the dynamic changes; blocking, called from worker threads."""

    @property
    def image(self) -> MetadataImage:
        """The state after every acknowledged change (an immutable value)."""
        ...

    @property
    def next_offset(self) -> int:
        """The position after the last change in the image (in the log or the topic)."""
        ...

    @property
    def location(self) -> str:
        """Where the store lives, for one-line errors (a path, a topic and its cluster)."""
        ...

    def append(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Make one request's records durable, apply them, and return the new image."""
        ...

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from any thread) whenever the image changes by itself.

        A shared store changes when another node writes; a local one never does.
        """
        ...

    def interrupt(self) -> None:
        """Fail the changes still waiting on something outside this process (a stopping server).

        A local append waits only for its own fsync: nothing to do. Later
        appends fail; reads go on until :meth:`close`.
        """
        ...

    def close(self) -> None:
        """Release the store; idempotent."""
        ...
