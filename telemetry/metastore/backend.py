"""What the admin plane needs of a metadata store, local file or Kafka topic alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

from telemetry.metastore.records import MetadataRecord

if TYPE_CHECKING:
    from collections.abc import Sequence

    from telemetry.metastore.image import MetadataImage

StateCheck: TypeAlias = Callable[[tuple[MetadataRecord, ...]], None]
"""The admin plane's rules, run on the whole stored state of one entity (its records,
never empty) read back from a store: raises for a state the admin API would refuse.

The metadata store's own code cannot know those rules (they belong to the admin
plane, a room above it), so whoever opens a store passes them in.
"""


@dataclass(slots=True)
class MetadataLogStats:
    """What ``/metrics`` shows of a store (read from the event loop, written by its reader)."""

    #: The next offset this node will apply: everything before it is in the image.
    position: int = 0
    #: The log's end as last seen (the shared topic: as its fetch responses carry it).
    high_watermark: int = 0
    applied_records: int = 0
    #: Messages (the shared topic) or records (the local store) that could not be
    #: decoded or that the admin plane's rules refuse: not applied, logged.
    skipped_records: int = 0
    #: Seconds between the last applied message's append (its timestamp, set by
    #: the producing node's clock) and its application here (the shared topic only).
    last_apply_delay_s: float = 0.0

    @property
    def lag_records(self) -> int:
        return max(0, self.high_watermark - self.position)


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
