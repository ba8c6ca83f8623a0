"""The decoded size of what the exporters have not yet consumed (``max_pending_decoded_bytes``).

The disk budget counts records as stored, compressed; the landing's work is
the decoded size (issue: a 1.2 KB push decoding to 7 M points). So the log
also counts the decoded bytes appended since open that some consumer has not
passed, and refuses a push beyond the bound as it does when its disk is full.
"""

from __future__ import annotations

import collections

__all__ = ["DecodedBacklog"]

#: Offsets per mark: memory is one small tuple per this many unconsumed
#: records, and a consumer's progress counts once it passes a whole group
#: (the backlog over-counts by at most one group).
_MARK_RECORDS = 64


class DecodedBacklog:
    """Decoded bytes appended since open, less what every consumer has passed.

    Records recovered at open count by their disk size only (``max_bytes``).
    """

    def __init__(self) -> None:
        #: (offset, decoded bytes appended up to and including it), oldest first.
        self._marks: collections.deque[tuple[int, int]] = collections.deque()
        self._appended = 0
        self._passed = 0

    @property
    def pending(self) -> int:
        return self._appended - self._passed

    def add(self, offset: int, size: int) -> None:
        self._appended += size
        marks = self._marks
        if marks and marks[-1][0] // _MARK_RECORDS == offset // _MARK_RECORDS:
            marks[-1] = (offset, self._appended)
        else:
            marks.append((offset, self._appended))

    def passed_below(self, low: int) -> None:
        """Every consumer is at ``low`` or beyond: groups wholly below it are consumed."""
        marks = self._marks
        while marks and marks[0][0] < low:
            self._passed = marks.popleft()[1]
