"""The landing's catalog side, run by its first lane: open the tables, read the position, commit.

It runs where pyiceberg may be loaded: in the first landing worker process
(``worker.py``) or, with ``workers = 0``, on that lane's thread. The serving
process only sends it requests (``lanes.py``) and keeps the exactly-once
bookkeeping (``exporter.py``): what it learns crosses the pipe as
``lane_messages`` dataclasses.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from exporters.iceberg import commits
from exporters.iceberg.import_parquet import parquet_landing_position
from exporters.iceberg.lake import open_catalog, open_table, split_by_kind
from exporters.iceberg.lane_messages import (
    CommitOutcome,
    Committed,
    FleetOutcome,
    FleetState,
    Opened,
)
from exporters.iceberg.rows import COALESCE_BYTES, COALESCE_PUSHES
from exporters.iceberg.schema import METRICS_TABLE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyiceberg.table import Table

    from exporters.iceberg.fleet import ControlRange, FileSet
    from exporters.iceberg.lane_messages import LakeSetup

__all__ = ["LakeTables"]


class LakeTables:
    """The landing's tables as one lane holds them between commits."""

    def __init__(self, setup: LakeSetup) -> None:
        self.setup = setup
        self._tables: dict[str, Table] = {}

    def open(self) -> Opened:
        """Open (or create, or evolve) the tables and read this node's newest commit in each."""
        setup = self.setup
        catalog = open_catalog(setup.location)
        floor = 0
        if setup.data_dir is not None and setup.log_id is not None:
            floor = parquet_landing_position(Path(setup.data_dir), setup.log_id)
        positions: dict[str, Committed | None] = {}
        for name in setup.tables:
            table = self._tables[name] = open_table(catalog, setup.location.namespace, name)
            position = commits.committed_position(table, setup.node_id)
            positions[name] = (
                None if position is None else Committed(position.log_id, position.offset_end)
            )
        return Opened(
            positions,
            floor,
            {name: table.location() for name, table in self._tables.items()},
            split_by_kind(self._tables[METRICS_TABLE]),
            COALESCE_PUSHES,
            COALESCE_BYTES,
            self._topic_offsets(),
        )

    def topic_offsets(self) -> dict[str, dict[int, int]]:
        """Per table, where each partition of the pushes topic stands now (tables refreshed)."""
        for name, table in self._tables.items():
            self._tables[name] = table.refresh()
        return self._topic_offsets()

    def _topic_offsets(self) -> dict[str, dict[int, int]]:
        topic = self.setup.topic
        if topic is None:
            return {}
        return {
            name: commits.topic_offsets(table, topic.topic_id)
            for name, table in self._tables.items()
        }

    def commit(self, name: str, files: list[str], first: int, last: int) -> CommitOutcome:
        """Append ``files`` to table ``name`` in one snapshot naming offsets ``first..last``.

        A failure is an outcome, not an exception: the exporter decides (it
        abandons the generation and reads the position again before a retry).
        """
        properties = {
            commits.NODE_ID: self.setup.node_id,
            commits.OFFSET_START: str(first),
            commits.OFFSET_END: str(last),
        }
        if self.setup.log_id:
            properties[commits.LOG_ID] = self.setup.log_id
        conflicts: list[int] = []
        try:
            self._tables[name] = commits.commit_files(
                self._tables[name], files, properties, conflicts
            )
        except Exception as error:
            return CommitOutcome(len(conflicts), repr(error))
        return CommitOutcome(len(conflicts))

    def commit_topic(
        self, name: str, files: list[str], ranges: Mapping[int, tuple[int | None, int]]
    ) -> CommitOutcome:
        """Append ``files`` holding offsets ``start..end-1`` of each partition (``ranges``).

        A fenced generation is an outcome too: the exporter reads where the
        table stands and feeds again from there.
        """
        properties = self._topic_properties()
        conflicts: list[int] = []
        try:
            self._tables[name] = commits.commit_topic_files(
                self._tables[name], files, properties, ranges, conflicts
            )
        except commits.FencedError as fenced:
            self._tables[name] = self._tables[name].refresh()
            return CommitOutcome(len(conflicts), str(fenced), fenced=True)
        except Exception as error:
            return CommitOutcome(len(conflicts), repr(error))
        return CommitOutcome(len(conflicts))

    def _topic_properties(self) -> dict[str, str]:
        """What every commit of a landing fed from the pushes topic names: node and topic."""
        topic = self.setup.topic
        if topic is None:
            raise RuntimeError("a landing not fed from the pushes topic commits by offsets")
        return {
            commits.NODE_ID: self.setup.node_id,
            commits.CLUSTER_ID: topic.cluster_id,
            commits.TOPIC: topic.topic,
            commits.TOPIC_ID: topic.topic_id,
        }

    def fleet_state(self, control_topic_id: str | None) -> FleetState:
        """Where the ``metrics`` table stands for the fleet now (refreshed)."""
        topic = self.setup.topic
        if topic is None:
            raise RuntimeError("a landing not fed from the pushes topic has no fleet")
        table = self._tables[METRICS_TABLE] = self._tables[METRICS_TABLE].refresh()
        control = (
            None if control_topic_id is None else commits.control_offset(table, control_topic_id)
        )
        return FleetState(
            commits.topic_offsets(table, topic.topic_id),
            control,
            commits.last_fleet_commit_ms(table),
        )

    def commit_fleet(self, sets: Sequence[FileSet], control: ControlRange) -> FleetOutcome:
        """Add the contiguous ``sets`` in one snapshot (``commits.commit_fleet``)."""
        properties = self._topic_properties()
        conflicts: list[int] = []
        try:
            table, added, dropped = commits.commit_fleet(
                self._tables[METRICS_TABLE], sets, properties, control, conflicts
            )
        except commits.FencedError as fenced:
            self._tables[METRICS_TABLE] = self._tables[METRICS_TABLE].refresh()
            return FleetOutcome(conflicts=len(conflicts), error=str(fenced), fenced=True)
        except Exception as error:
            return FleetOutcome(conflicts=len(conflicts), error=repr(error))
        self._tables[METRICS_TABLE] = table
        return FleetOutcome(tuple(added), tuple(dropped), len(conflicts))
