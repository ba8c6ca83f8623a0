"""``IcebergExporter``: the landing as an Apache Iceberg table that several nodes share.

How exactly-once works with the host (``exporters.api.BufferingExporter``):
``export`` gathers pushes of the current *generation* (a contiguous run of
log offsets) and hands them to a lane (a worker process, ``lanes.py``) 512
at a time (or 4 MiB of payload; the rest when the generation is written); the
lane flattens them as one Arrow batch and buffers the rows. ``export`` waits
only while every lane has two batches queued.
Past ``max_pending_rows`` the lanes write their rows out as data files (not
yet committed); once the generation is ``max_file_age_s`` old (and on
``flush``) its files are committed in one snapshot whose properties name
this node, its ingest log and the offsets covered (``commits.py``).
``durable_offset`` is the first offset of the uncommitted generation, so the
host never commits past data that is not in a committed snapshot; after a
restart the exporter resumes after the newest snapshot this node wrote (and
skips replayed offsets below it), so every push lands once even after
SIGKILL between the Iceberg commit and the host's.

Every catalog operation runs in the first lane (``committer.py``): it
opens the tables and reads where this node stands at start, and commits
each generation's files; this process keeps only the bookkeeping, and never
imports pyiceberg or pyarrow (docs/architecture.md "Processes"). With
``workers = 0`` that lane is a thread here.

A failed write (a full warehouse disk) or commit (a locked or unreachable
catalog, a commit that keeps losing the race) costs the generation, not the
landing: the lanes are replaced (their rows dropped), ``durable_offset``
falls back to the last committed snapshot, ``take_replay`` tells the host to
feed again from there (the ingest log holds every push), and ``export``
refuses with ``TransientExportError`` until a backoff (0.1 s doubling to
30 s, jittered) has passed. ``failing`` says why meanwhile (``/readyz`` is
false); the first failure of a streak is logged and counted once
(``failure_streaks``; every attempt in ``failures``), and the first commit
after it logs the recovery. Files written for a generation that was never
committed are orphans, removed by orphan cleanup. A commit in progress is
finished before a cancellation is delivered (``run_to_completion``), so the
exporter always knows whether it happened, or, when the lane committing it
died meanwhile, that it does not know: then the commit counts as failed,
and the retry starts fresh lanes, whose first reads the position from the
table again before anything is exported (what a restart does), so a commit
that did happen is never applied twice.

Fed from the pushes topic (``[log] store = "kafka"``, ``PartitionedExporter``)
the bookkeeping is per partition: a rebalance hands partitions over
(``assign`` reads where the table stands for each, ``revoke`` commits the
open generation first), and each generation is committed only where the
table still stands where it started for each of its partitions
(``commits.commit_topic_files``); a *fenced* generation (another node landed
those offsets meanwhile) is dropped like a failed one, and the partitions
still assigned are fed again from where the table stands. Rows carry
``log_partition``.

With ``fleet_commits`` (the default in that mode, once the server gave it a
way to publish, ``use_fleet``) a generation is not committed here: its
files are published as one file set on the control topic and the fleet's
one committer adds them (``fleet.py``); the next generation of a partition
continues this node's chain of sets, and every ``commit_interval_s`` the
landing reads where the table stands (``fleet.FleetChain.judge``): sets the
table holds are durable, a chain the table does not continue (a set
dropped) or sets waiting longer than ``FLEET_STALL_INTERVALS`` intervals
are given up, and the partitions fed again from the table.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
import os
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

from durable.cancellation import run_to_completion
from exporters.api import LoggedPush, TransientExportError
from exporters.iceberg.fleet import FileSet, FleetChain, SetFile
from exporters.iceberg.generations import GenerationLanding, age_timer, free_worker, stop_task
from exporters.iceberg.lane_messages import LakeSetup, LaneStart, TopicBinding
from exporters.iceberg.lanes import ProcessLane, ThreadLane
from exporters.iceberg.maintenance_schedule import Maintenance
from exporters.iceberg.settings import MaintenanceSettings, MaintenanceStats, lake_location
from exporters.options import bool_option, int_option, number_option
from exporters.otlp_rows import FlattenStats

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from exporters.iceberg.fleet import ControlRange
    from exporters.iceberg.lane_messages import CommitOutcome, FleetOutcome, FleetState, Opened
    from exporters.iceberg.rows import BatchReply, WrittenFile

__all__ = ["COMMIT_BUCKETS_S", "DEFAULTS", "IcebergExporter", "IcebergStats"]

_log = logging.getLogger(__name__)

DEFAULTS: Final[Mapping[str, Any]] = {
    "max_file_age_s": 5.0,
    "max_pending_rows": 2_000_000,
    "raw": False,
    "node_id": None,
    "compact_after_hours": None,
    "expire_snapshots_after_hours": None,
    "retention_hours": None,
    "orphan_files_after_hours": None,
    "maintenance_interval_s": 600.0,
    "workers": max(1, (os.cpu_count() or 2) - 1),
    "max_data_points_per_push": 1_000_000,
    "fleet_commits": True,
    "commit_interval_s": 5.0,
}
_LAKE_KEYS: Final = frozenset(
    {
        "path",
        "catalog",
        "warehouse",
        "namespace",
        "s3_endpoint",
        "s3_region",
        "s3_access_key_id",
        "s3_secret_access_key",
    }
)
_OPTIONS: Final = frozenset({*_LAKE_KEYS, *DEFAULTS})
#: The lake's tables (``schema.METRICS_TABLE``, ``schema.PUSHES_TABLE``; that module needs pyarrow).
METRICS_TABLE: Final = "metrics"
PUSHES_TABLE: Final = "pushes"
NODE_ID_FILE: Final = "node_id"
#: Batches queued per lane beyond the one it is flattening; bounds memory.
IN_FLIGHT_PER_LANE: Final = 2
#: Backoff after a failed write or commit: the first wait, and the longest.
RETRY_INITIAL_S: Final = 0.1
RETRY_MAX_S: Final = 30.0
#: Upper bounds (seconds) of the commit latency histogram (``kip714_landing_commit_seconds``).
COMMIT_BUCKETS_S: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Fleet commits: file sets waiting longer than this many commit intervals (and at least
#: ``FLEET_STALL_MIN_S``) are given up and fed again; readiness turns false then too.
FLEET_STALL_INTERVALS: Final = 6
FLEET_STALL_MIN_S: Final = 30.0


class LakeUnavailableError(Exception):
    """The first lane could not open the tables (the catalog is away): the reason it gave."""


@dataclass(slots=True)
class IcebergStats(FlattenStats):
    """Running totals: the flattening counters plus the lake's own.

    ``refused_counts`` counts data points left out because a count exceeded
    2^63−1 (Iceberg's ``long``).
    """

    rows_landed: int = 0
    raw_rows_landed: int = 0
    files_written: int = 0
    commits: int = 0
    commit_conflicts: int = 0
    refused_counts: int = 0
    unlandable_pushes: int = 0
    replayed_pushes_skipped: int = 0
    fenced_generations: int = 0  # fed from the pushes topic: another node had landed them
    file_sets_published: int = 0  # fleet commits: generations handed to the committer
    rows_published: int = 0
    file_set_chains_dropped: int = 0  # the committer dropped one, or it waited too long
    failures: int = 0  # failed writes and commits (each attempt)
    failure_streaks: int = 0  # runs of failures ended by a commit (each counted once)
    durable_offset: int = 0
    pending_rows: int = 0
    #: This node's own commits (not the fleet's): their time, per ``COMMIT_BUCKETS_S`` bound.
    commit_seconds_total: float = 0.0
    commit_bucket_counts: list[int] = field(
        default_factory=lambda: [0] * (len(COMMIT_BUCKETS_S) + 1)
    )

    def observe_commit(self, seconds: float) -> None:
        self.commit_seconds_total += seconds
        self.commit_bucket_counts[bisect.bisect_left(COMMIT_BUCKETS_S, seconds)] += 1


@dataclass(slots=True)
class _Generation:
    first: int
    started: float
    last: int = -1
    batches: list[asyncio.Future[Any]] = field(default_factory=list)
    gathered: list[LoggedPush] = field(default_factory=list)  # not handed to a lane yet
    gathered_bytes: int = 0
    buffered: dict[int, int] = field(default_factory=dict)  # rows buffered per lane
    files: list[WrittenFile] = field(default_factory=list)
    #: Fed from the pushes topic, per partition: where the table stood when the generation
    #: took its first push of it (``None``: it held none), and the offset past its last push.
    starts: dict[int, int | None] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    abandoned: bool = False  # a write or commit failed: the host replays it


def node_id_in(data_dir: Path) -> str:
    """This node's id kept in ``data_dir`` (a UUID created on first use)."""
    path = data_dir / NODE_ID_FILE
    with contextlib.suppress(FileNotFoundError):
        text = path.read_text().strip()
        if text:
            return text
    data_dir.mkdir(parents=True, exist_ok=True)
    fresh = str(uuid.uuid4())
    temp = path.with_suffix(".tmp")
    temp.write_text(fresh + "\n")
    os.replace(temp, path)
    return path.read_text().strip()


@final
class IcebergExporter(GenerationLanding):
    """Lands every data point in ``<namespace>.metrics`` (and ``pushes`` with ``raw``).

    Raises (at construction):
        TypeError: An unknown option.
        ValueError: An option with an invalid value.
    """

    stats: IcebergStats

    def __init__(self, config: Mapping[str, Any], /) -> None:
        unknown = sorted(set(config) - _OPTIONS)
        if unknown:
            raise TypeError(
                f"unknown option {unknown[0]!r} for the iceberg exporter "
                f"(known: {', '.join(sorted(_OPTIONS))})"
            )
        options = {**DEFAULTS, **config}
        path = config.get("path")
        self.data_dir = None if path is None else Path(os.fspath(path))
        self.location = lake_location(config, self.data_dir)
        self.max_file_age_s = number_option(options, "max_file_age_s", 0.01)
        self.max_pending_rows = int_option(options, "max_pending_rows", 1)
        self.workers = int_option(options, "workers", 0, 64)
        self.max_data_points_per_push = int_option(options, "max_data_points_per_push", 1)
        self.raw = bool_option(options, "raw")
        self.fleet_commits = bool_option(options, "fleet_commits")
        self.commit_interval_s = number_option(options, "commit_interval_s", 0.01)
        node_id = options["node_id"]
        if node_id is not None and (not isinstance(node_id, str) or not node_id.strip()):
            raise ValueError(f"option 'node_id' must be a non-empty string: {node_id!r}")
        if node_id is None and self.data_dir is None:
            raise ValueError("option 'node_id' is required when 'path' is not given")
        self._node_id: str | None = node_id
        self.maintenance_settings = MaintenanceSettings.from_options(options)
        self.stats = IcebergStats()
        """Running counters for the server's metrics; see ``IcebergStats``."""
        self._log_id: str | None = None
        self._tables = (METRICS_TABLE, PUSHES_TABLE) if self.raw else (METRICS_TABLE,)
        self._coalesce = (1, 1)  # pushes, bytes: what the lanes say once they opened the tables
        self._from: dict[str, int] = {}  # per table: the first offset it does not hold
        self._next = 0  # offsets below were landed before this start, or exported since
        self._lanes: list[ProcessLane | ThreadLane] = []
        self._round_robin = 0
        self._gen: _Generation | None = None
        self._maintenance: Maintenance | None = None
        self._durable = 0
        self._failing: str | None = None
        self._retry_at = 0.0
        self._backoff_s = RETRY_INITIAL_S
        self._replay_from: int | None = None
        self._lanes_stale = False
        self._topic: TopicBinding | None = None
        #: Fed from the pushes topic, per assigned partition: the next offset the table does
        #: not hold (``None``: none of it), and the next one ``export`` takes.
        self._landed: dict[int, int | None] = {}
        self._taken: dict[int, int | None] = {}
        #: Fleet commits: how file sets reach the control topic (``use_fleet``), this node's
        #: chain of them, and the table's newest fleet commit (ms since the epoch).
        self._publish: Callable[[bytes], Awaitable[None]] | None = None
        self._chain = FleetChain()
        self.last_fleet_commit_ms: int | None = None
        self._fleet_task: asyncio.Task[None] | None = None
        self._fleet_failing = False
        self._init_generations()

    @property
    def node_id(self) -> str:
        """The id naming this node in commits and in ``ingest_node`` (known after ``start``)."""
        if self._node_id is None:
            raise RuntimeError("node_id is known after start()")
        return self._node_id

    @property
    def failing(self) -> str | None:
        """Why the last write or commit failed, until a commit succeeds (readiness reports it).

        With fleet commits, also file sets waiting for the committer too long.
        """
        if self._failing is None and self._fleet_stalled_s() is not None:
            return (
                f"file sets wait {self._fleet_stalled_s():.0f} s for the fleet's committer "
                f"(last fleet commit {self.fleet_commit_age_s()} s ago)"
            )
        return self._failing

    @property
    def topic_binding(self) -> TopicBinding | None:
        """The pushes topic feeding the landing (``bind_topic``), else ``None``."""
        return self._topic

    @property
    def fleet(self) -> bool:
        """Whether generations go to the fleet's committer (``use_fleet`` was called)."""
        return self._publish is not None

    def use_fleet(self, publish: Callable[[bytes], Awaitable[None]], /) -> None:
        """Publish generations as file sets through ``publish`` (before ``start``).

        Fed from the pushes topic only, and only with ``fleet_commits``; the
        server calls it with a producer of the control topic.
        """
        if not self.fleet_commits:
            raise RuntimeError("fleet commits need fleet_commits = true")
        self._publish = publish

    @property
    def file_sets_waiting(self) -> int:
        """This node's file sets published and not yet in the table."""
        return len(self._chain.pending)

    def fleet_commit_age_s(self) -> str:
        """Seconds since the table's newest fleet commit, as text ("none yet" before one)."""
        if self.last_fleet_commit_ms is None:
            return "none yet"
        return f"{max(0.0, time.time() - self.last_fleet_commit_ms / 1000):.0f}"

    def _fleet_stall_s(self) -> float:
        return max(FLEET_STALL_INTERVALS * self.commit_interval_s, FLEET_STALL_MIN_S)

    def _fleet_stalled_s(self) -> float | None:
        """How long the oldest file set has waited, once past the stall bound; else ``None``."""
        oldest = self._chain.oldest()
        if oldest is None:
            return None
        waited = time.monotonic() - oldest
        return waited if waited > FLEET_STALL_INTERVALS * self.commit_interval_s else None

    def take_replay(self) -> int | None:
        """Once after a failure: the offset the host must feed again from (else ``None``)."""
        offset, self._replay_from = self._replay_from, None
        return offset

    @property
    def maintenance_stats(self) -> MaintenanceStats | None:
        """What the scheduled maintenance did; ``None`` when none is configured."""
        return None if self._maintenance is None else self._maintenance.stats

    # -- the Exporter contract ----------------------------------------------------------------

    def bind_log(self, log_id: str, /) -> None:
        """The id of the ingest log feeding the lake (``LogBoundExporter``)."""
        self._log_id = log_id

    def bind_topic(self, cluster_id: str, topic: str, topic_id: str, /) -> None:
        """Fed from the pushes topic: positions are per partition (``PartitionedExporter``).

        Raises:
            ValueError: ``raw = true``, which this mode does not land yet.
        """
        if self.raw:
            raise ValueError(
                "option 'raw' is not available with [log] store = \"kafka\": set raw = false"
            )
        self._topic = TopicBinding(cluster_id, topic, topic_id)

    async def assign(self, partitions: Sequence[int], /) -> Mapping[int, int | None]:
        """Take ``partitions`` over, each where the table stands now (a rebalance).

        Raises:
            TransientExportError: The table could not be read (the host retries).
        """
        if not self._started or self._closed:
            raise RuntimeError("iceberg exporter used before start() or after close()")
        async with self._gen_lock:
            await self._replace_stale_lanes()
            try:
                reply = await self._lanes[0].topic_offsets()
            except Exception as error:
                raise TransientExportError(
                    f"{self._where()}: reading the table: {error}"
                ) from error
            table: Mapping[int, int] = reply[1].get(METRICS_TABLE, {})
            for partition in partitions:
                self._landed[partition] = self._taken[partition] = table.get(partition)
            return {partition: self._landed[partition] for partition in partitions}

    async def revoke(self, partitions: Sequence[int], /) -> Mapping[int, int]:
        """Commit the open generation, then forget ``partitions``; where the table holds them.

        A commit that fails leaves their pushes to the next owner, which
        resumes where the table stands.
        """
        try:
            await self.flush()
        except TransientExportError as error:
            _log.warning(
                "%s: partitions %s revoked before their pushes were committed (%s); their "
                "next owner lands them",
                self._where(),
                sorted(partitions),
                error,
            )
        if self.fleet:
            await self._await_fleet(partitions)
        async with self._gen_lock:
            durable = {p: o for p in partitions if (o := self._landed.get(p)) is not None}
            for partition in partitions:
                self._landed.pop(partition, None)
                self._taken.pop(partition, None)
            self._chain.forget(partitions)
            return durable

    async def _await_fleet(self, partitions: Sequence[int]) -> None:
        """Wait (bounded) until the table holds this node's file sets of ``partitions``.

        Their next owner resumes where the table stands: a set still on its
        way would be dropped by the committer after the owner's first (the
        owner then feeds again), so waiting here saves that round.
        """
        wanted = set(partitions)
        deadline = time.monotonic() + self._fleet_stall_s()
        while time.monotonic() < deadline and any(
            wanted & set(s.ranges) for s in self._chain.pending
        ):
            await asyncio.sleep(min(0.5, self.commit_interval_s / 2))
            await self._read_fleet()

    def _resume_takes(self) -> dict[int, int | None]:
        """Per assigned partition, the first offset a replay takes again: past what the table
        holds and, with fleet commits, past what this node's file sets on their way hold."""
        return {p: self._chain.start_of(p, landed) for p, landed in self._landed.items()}

    def durable_offsets(self) -> Mapping[int, int]:
        """Per assigned partition, the next offset not in a committed snapshot."""
        return {p: o for p, o in self._landed.items() if o is not None}

    def resume_offsets(self) -> Mapping[int, int | None]:
        """Per assigned partition, where the table stands (``None``: it holds none of it)."""
        return dict(self._landed)

    async def start(self) -> None:
        """Open (or create) the tables, find where this node stands, start lanes and timers."""
        if self._closed:
            raise RuntimeError("iceberg exporter is closed")
        if self._started:
            return
        if self._publish is not None and self._topic is None:
            raise RuntimeError("fleet commits need the pushes topic (bind_topic before start)")
        if self._node_id is None:
            assert self.data_dir is not None
            self._node_id = await asyncio.to_thread(node_id_in, self.data_dir)
        opened = await self._start_lanes()
        self._resume(opened)
        self._started = True
        self._timer = asyncio.create_task(self._age_timer(), name="iceberg-age")
        if self.fleet:
            self._fleet_task = asyncio.create_task(self._watch_fleet(), name="iceberg-fleet")
            self._fleet_task.add_done_callback(self._fleet_task_done)
        if self.maintenance_settings.enabled:
            self._maintenance = Maintenance(
                self.location, self.maintenance_settings, in_process=not self.workers
            )
            self._maintenance.start()

    async def _start_lanes(self) -> Opened:
        """Start fresh lanes (a new token: their file names never collide with earlier ones).

        The first lane opens the tables and reads where this node stands in
        each (what the table says, as after a restart); the others are told
        the tables' locations.

        Raises:
            LakeUnavailableError: The tables could not be opened (the lanes are stopped).
        """
        try:
            lane_options = {
                "node_id": self.node_id,
                "io_properties": self.location.catalog_properties(),
                "token": uuid.uuid4().hex[:8],
                "max_data_points_per_push": self.max_data_points_per_push,
                "partitioned": self._topic is not None,
            }
            setup = LakeSetup(
                self.location,
                self.node_id,
                self._log_id,
                self._tables,
                None if self.data_dir is None else str(self.data_dir),
                self._topic,
            )
            for index in range(max(1, self.workers)):
                start = LaneStart(index, lane_options, setup if index == 0 else None)
                lane = ProcessLane(start) if self.workers else ThreadLane(start)
                self._lanes.append(lane)
                await lane.start()
            reply = await self._lanes[0].open()
            if reply[0] != "opened":
                raise LakeUnavailableError(reply[1])
            opened: Opened = reply[1]
            await asyncio.gather(
                *(lane.configure(opened.locations, opened.by_kind) for lane in self._lanes[1:])
            )
        except BaseException:
            await self._stop_lanes()
            raise
        self._coalesce = (opened.coalesce_pushes, opened.coalesce_bytes)
        return opened

    def _resume(self, opened: Opened) -> None:
        """Start after this node's newest commit in each table (and a Parquet landing's)."""
        if self._topic is not None:  # per partition, on assignment; the lanes filter nothing
            self._from = dict.fromkeys(self._tables, 0)
            return
        for name in self._tables:
            position = opened.positions[name]
            start = opened.floor
            if position is not None and position.log_id in (None, self._log_id):
                start = max(start, position.offset_end + 1)
            elif position is not None:
                _log.warning(
                    "lake table %s.%s: node %s last landed ingest log %s; ingest log %s feeds "
                    "it now, landed from its offset %d (was the log directory replaced?)",
                    self.location.namespace,
                    name,
                    self.node_id,
                    position.log_id,
                    self._log_id,
                    start,
                )
            self._from[name] = start
        self._durable = self._next = min(self._from.values())
        self.stats.durable_offset = self._durable
        _log.debug(
            "iceberg landing %s.%s on node %s resumes at offset %d",
            self.location.namespace,
            METRICS_TABLE,
            self.node_id,
            self._durable,
        )

    def durable_offset(self) -> int:
        """The first offset not yet in a committed snapshot (see the module docstring)."""
        if self._gen is not None:
            return self._gen.first
        return max(self._durable, self._next)

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        """Hand ``batch`` to a lane; write or commit the generation when due.

        Raises:
            TransientExportError: The landing has failed and needs a restart.
        """
        if not self._started or self._closed:
            raise RuntimeError("iceberg exporter used before start() or after close()")
        self._raise_if_failed()
        if self._topic is not None:
            await self._export_partitioned(batch)
            return
        start = self._skip_replayed(batch, self._next)
        if start == len(batch):
            return
        pushes = batch[start:]
        async with self._gen_lock:
            self._raise_if_failed()
            await self._retry_when_due()
            # A retry may have found a commit applied after all: skip what it holds.
            pushes = pushes[self._skip_replayed(pushes, self._next) :]
            if not pushes:
                return
            gen = self._gen
            if gen is None:
                gen = self._gen = _Generation(pushes[0].offset, time.monotonic())
            # Gathered here first: the host hands over whatever the log holds
            # (a few pushes at a time when it keeps up), and each hand-over to a
            # worker costs a pipe round trip in this process.
            gen.gathered.extend(pushes)
            gen.gathered_bytes += sum(len(p.payload) for p in pushes)
            gen.last = pushes[-1].offset
            self._next = gen.last + 1
            await self._took(gen)

    async def _export_partitioned(self, batch: Sequence[LoggedPush]) -> None:
        """``export`` fed from the pushes topic: offsets are per partition."""
        async with self._gen_lock:
            self._raise_if_failed()
            await self._retry_when_due()
            pushes = self._untaken(batch)
            if not pushes:
                return
            gen = self._gen
            if gen is None:
                gen = self._gen = _Generation(pushes[0].offset, time.monotonic())
            landed, taken = self._landed, self._taken
            for push in pushes:
                partition = push.partition
                if partition not in gen.starts:
                    gen.starts[partition] = self._chain.start_of(partition, landed[partition])
                gen.ends[partition] = taken[partition] = push.offset + 1
            gen.gathered.extend(pushes)
            gen.gathered_bytes += sum(len(p.payload) for p in pushes)
            gen.last = pushes[-1].offset
            await self._took(gen)

    def _untaken(self, batch: Sequence[LoggedPush]) -> list[LoggedPush]:
        """The pushes of assigned partitions not taken yet (a replay repeats some; counted)."""
        fresh: list[LoggedPush] = []
        for push in batch:
            partition = push.partition
            if partition in self._landed:
                taken = self._taken[partition]
                if taken is None or push.offset >= taken:
                    fresh.append(push)
        self.stats.replayed_pushes_skipped += len(batch) - len(fresh)
        return fresh

    async def _took(self, gen: _Generation) -> None:
        """Hand over, write or commit ``gen`` as what it gathered and its age require."""
        if len(gen.gathered) >= self._coalesce[0] or gen.gathered_bytes >= self._coalesce[1]:
            await self._hand_over(gen)
        if sum(gen.buffered.values()) >= self.max_pending_rows:
            await run_to_completion(self._write(gen))
        if time.monotonic() - gen.started >= self.max_file_age_s:
            await self._commit()

    async def _retry_when_due(self) -> None:
        """After a failure: refuse until the backoff has passed, then start with fresh lanes.

        Raises:
            TransientExportError: Still within the backoff.
        """
        if self._failing is None:
            return
        wait = self._retry_at - time.monotonic()
        if wait > 0:
            raise TransientExportError(
                f"{self._where()} is failing ({self._failing}); next attempt in {wait:.1f} s"
            )
        await self._replace_stale_lanes()

    async def _replace_stale_lanes(self) -> None:
        """(Holding ``_gen_lock``.) Fresh lanes after a failed generation or a dead worker.

        The committer's calls and a rebalance need the first lane whether or
        not pushes arrive (an idle committer's worker killed by the OOM
        killer must not stop the fleet's commits), so they replace the lanes
        too, once the failure's backoff has passed.

        Raises:
            TransientExportError: Within the backoff, or the new lanes cannot read the table.
        """
        if not self._lanes_stale and not any(lane.failed for lane in self._lanes):
            return
        self._lanes_stale = True
        wait = self._retry_at - time.monotonic()
        if wait > 0:
            raise TransientExportError(
                f"{self._where()}: its lanes are replaced in {wait:.1f} s "
                f"({self._failing or 'a worker failed'})"
            )
        try:
            opened = await run_to_completion(self._restart_lanes())
        except Exception as error:  # the catalog is still away: another round of backoff
            self.stats.failures += 1
            self._backoff_s = min(self._backoff_s * 2, RETRY_MAX_S)
            self._retry_at = time.monotonic() + self._backoff_s * random.uniform(0.5, 1.0)
            raise TransientExportError(f"{self._where()}: reading the table: {error}") from error
        self._lanes_stale = False
        self._reload_positions(opened)

    def _reload_positions(self, opened: Opened) -> None:
        """Take where this node stands in each table, as fresh lanes read it.

        A commit that failed may still have been applied (an answer lost on
        the way back, or a worker that died during the commit): what the
        table says wins, and replayed offsets it holds are skipped. Fed from
        the pushes topic, a partition the table holds less of than this node
        thought is fed again from there.
        """
        if self._topic is not None:
            table = opened.topic_offsets.get(METRICS_TABLE, {})
            for partition, known in self._landed.items():
                now = table.get(partition)
                self._landed[partition] = now
                self._taken[partition] = self._chain.start_of(partition, now)
                if known is not None and (now is None or now < known):
                    self._replay_from = 0
            return
        for name in self._tables:
            position = opened.positions[name]
            if position is not None and position.log_id in (None, self._log_id):
                self._from[name] = max(self._from[name], position.offset_end + 1)
        self._durable = max(self._durable, min(self._from.values()))
        self._next = max(self._next, self._durable)
        self.stats.durable_offset = self._durable

    async def _restart_lanes(self) -> Opened:
        await self._stop_lanes()
        return await self._start_lanes()

    def _abandon(self, gen: _Generation, reason: str) -> None:
        """Drop ``gen`` after a failed write or commit; the host replays it after a backoff."""
        if gen.abandoned:
            return
        gen.abandoned = True
        self.stats.failures += 1
        if self._failing is None:
            self.stats.failure_streaks += 1
            self._backoff_s = RETRY_INITIAL_S
            _log.error(
                "%s: %s; retrying with backoff from offset %d (the ingest log keeps every push)",
                self._where(),
                reason,
                self._durable,
            )
        else:
            self._backoff_s = min(self._backoff_s * 2, RETRY_MAX_S)
            _log.debug("%s: %s (again)", self._where(), reason)
        self._failing = reason
        self._retry_at = time.monotonic() + self._backoff_s * random.uniform(0.5, 1.0)
        if self._gen is gen:
            self._gen = None
        self._next = self._durable
        self._replay_from = self._durable
        self._taken.update(self._resume_takes())
        self._lanes_stale = True  # they may hold rows of ``gen`` or be poisoned
        self.stats.pending_rows = 0

    def _recovered(self) -> None:
        if self._failing is not None:
            _log.info("%s recovered: committed again after %s", self._where(), self._failing)
        self._failing = None
        self._backoff_s = RETRY_INITIAL_S

    async def _hand_over(self, gen: _Generation) -> None:
        """Send the gathered pushes of ``gen`` to the next free lane (they stay in ``gen``)."""
        if not gen.gathered:
            return
        index = await self._free_lane()
        self._raise_if_failed()
        pushes, gen.gathered, gen.gathered_bytes = gen.gathered, [], 0
        future = self._lanes[index].batch(
            pushes, self._from[METRICS_TABLE], self._from.get(PUSHES_TABLE)
        )
        future.add_done_callback(functools.partial(self._on_batch, gen, index))
        gen.batches.append(future)

    async def _free_lane(self) -> int:
        """The next lane in turn with room for a batch (round robin keeps them even)."""
        index, self._round_robin = await free_worker(
            self._lanes,
            self._round_robin,
            IN_FLIGHT_PER_LANE,
            lambda: self._gen.batches if self._gen else [],
            self._raise_if_failed,
        )
        return index

    def _on_batch(self, gen: _Generation, lane: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            self._abandon(gen, f"flattening offsets {gen.first}..{gen.last} failed: {error}")
            return
        reply: BatchReply = future.result()[1]
        self._count(reply)
        gen.buffered[lane] = reply.buffered
        self.stats.pending_rows = sum(gen.buffered.values())

    def _count(self, reply: BatchReply) -> None:
        self.stats.merge(reply.stats)
        self.stats.refused_counts += reply.refused_counts
        self.stats.unlandable_pushes += reply.unlandable

    def _where(self) -> str:
        return f"iceberg landing {self.location.namespace}.{METRICS_TABLE}"

    async def _before_close(self) -> None:
        await stop_task(self._fleet_task)
        if self._maintenance is not None:
            await self._maintenance.stop()

    async def _release(self) -> None:
        await self._stop_lanes()

    async def _seal(self) -> None:
        await self._commit()

    async def _stop_lanes(self) -> None:
        lanes, self._lanes = self._lanes, []
        await asyncio.gather(*(lane.stop() for lane in lanes), return_exceptions=True)

    # -- generations ---------------------------------------------------------------------------

    async def _write(self, gen: _Generation) -> None:
        """Have every lane write its buffered rows of ``gen`` as data files (not committed)."""
        try:
            await self._hand_over(gen)
            await asyncio.gather(*gen.batches)
            replies = await asyncio.gather(
                *(lane.write(gen.first, gen.last) for lane in self._lanes)
            )
        except Exception as error:
            reason = f"writing data files of offsets {gen.first}..{gen.last} failed: {error}"
            self._abandon(gen, reason)
            raise TransientExportError(reason) from error
        if gen.abandoned:  # a batch failed meanwhile
            raise TransientExportError(self._failing or "the generation was abandoned")
        for reply in replies:
            gen.files.extend(reply[1])
            self._count(reply[2])
        self.stats.files_written += sum(len(reply[1]) for reply in replies)
        gen.batches = []
        gen.buffered = {}
        self.stats.pending_rows = 0

    async def _commit(self) -> None:
        """Write what is buffered and commit the generation: one snapshot per table."""
        gen = self._gen
        if gen is None:
            return
        await run_to_completion(self._write(gen))
        if self.fleet:
            await run_to_completion(self._publish_generation(gen))
        else:
            await run_to_completion(self._commit_generation(gen))

    async def _commit_generation(self, gen: _Generation) -> None:
        """Commit ``gen``'s files, one snapshot per table, through the first lane.

        A lane that dies meanwhile leaves it unknown whether the commit
        happened: the generation is abandoned like a failed commit, and the
        retry reads the position from the table before anything is replayed.
        """
        for name in sorted(self._tables):
            files = [f for f in gen.files if f.table == name]
            if not files:
                continue
            started = time.monotonic()
            try:
                reply = await self._commit_files(name, [f.location for f in files], gen)
            except Exception as error:
                reason = f"committing offsets {gen.first}..{gen.last} failed: {error!r}"
                self._abandon(gen, reason)
                raise TransientExportError(reason) from error
            outcome: CommitOutcome = reply[1]
            self.stats.commit_conflicts += outcome.conflicts
            if outcome.fenced:
                self.stats.fenced_generations += 1
                reason = f"generation not committed, another node landed it: {outcome.error}"
                self._abandon(gen, reason)
                raise TransientExportError(reason)
            if outcome.error is not None:
                reason = f"committing offsets {gen.first}..{gen.last} failed: {outcome.error}"
                self._abandon(gen, reason)
                raise TransientExportError(reason)
            self.stats.commits += 1
            self.stats.observe_commit(time.monotonic() - started)
            if self._topic is None:  # (per partition offsets: the lanes filter nothing)
                self._from[name] = gen.last + 1  # a later failure of another table replays none
            landed = sum(f.rows for f in files)
            if name == METRICS_TABLE:
                self.stats.rows_landed += landed
            else:
                self.stats.raw_rows_landed += landed
        if any(f.table == METRICS_TABLE for f in gen.files):  # else the table did not move
            self._landed.update((p, end) for p, end in gen.ends.items() if p in self._landed)
        self._durable = gen.last + 1
        self.stats.durable_offset = self._durable
        self._gen = None
        self._recovered()

    def _commit_files(self, name: str, locations: list[str], gen: _Generation) -> Any:
        """The first lane's commit of ``gen``'s files of table ``name`` (a future)."""
        if self._topic is None:
            return self._lanes[0].commit(name, locations, gen.first, gen.last)
        ranges = {p: (gen.starts[p], end) for p, end in gen.ends.items()}
        return self._lanes[0].commit_topic(name, locations, ranges)

    # -- fleet commits -------------------------------------------------------------------------

    async def _publish_generation(self, gen: _Generation) -> None:
        """Hand ``gen``'s files to the fleet's committer as one file set (instead of a commit)."""
        assert self._publish is not None
        assert self._topic is not None
        files = tuple(SetFile(f.table, f.location, f.rows) for f in gen.files)
        if files:
            ranges = {p: (gen.starts[p], end) for p, end in gen.ends.items()}
            file_set = FileSet(
                uuid.uuid4().hex,
                self.node_id,
                self._topic.topic_id,
                ranges,
                files,
                self.location.namespace,
            )
            try:
                await self._publish(file_set.encode())
            except Exception as error:
                reason = f"publishing the file set of offsets {gen.first}..{gen.last}: {error}"
                self._abandon(gen, reason)
                raise TransientExportError(reason) from error
            self._chain.published(file_set.set_id, ranges, time.monotonic())
            self.stats.file_sets_published += 1
            self.stats.rows_published += sum(f.rows for f in files)
        self._durable = gen.last + 1
        self._gen = None
        self._recovered()

    async def _watch_fleet(self) -> None:
        """Every ``commit_interval_s``: which file sets the table holds; whether the chain holds."""
        while not self._closed:
            await asyncio.sleep(self.commit_interval_s)
            await self._read_fleet()

    async def _read_fleet(self) -> None:
        try:
            state: FleetState = (await (await self._first_lane()).fleet_state(None))[1]
        except Exception as error:  # lanes being replaced, the catalog away: next interval
            if not self._fleet_failing:
                self._fleet_failing = True
                _log.warning("%s: cannot read the table for the fleet: %s", self._where(), error)
            return
        if self._fleet_failing:
            self._fleet_failing = False
            _log.info("%s reads the table for the fleet again", self._where())
        async with self._gen_lock:
            self._judge_fleet(state)

    def _judge_fleet(self, state: FleetState) -> None:
        """Take what the table holds; give the chain up if it cannot continue (see above)."""
        self.last_fleet_commit_ms = state.last_commit_ms
        if self._failing is not None or self._lanes_stale:
            return  # a replay from the table is under way
        broken = self._chain.judge(state.offsets, self._landed)
        oldest = self._chain.oldest()
        if broken is None and oldest is not None:
            waited = time.monotonic() - oldest
            if waited > self._fleet_stall_s():
                broken = f"file sets waited {waited:.0f} s for the fleet's committer"
        for partition in self._landed:
            self._landed[partition] = state.offsets.get(partition)
        if broken is None:
            return
        self.stats.file_set_chains_dropped += 1
        self._chain.reset()
        if self._gen is not None:
            self._abandon(self._gen, f"its file sets cannot land: {broken}")
            return
        _log.warning("%s: %s; feeding again from the table", self._where(), broken)
        self._taken.update(self._landed)
        self._replay_from = 0

    def _fleet_task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            _log.error("%s: the fleet watch died", self._where(), exc_info=task.exception())

    async def _first_lane(self) -> ProcessLane | ThreadLane:
        """The first lane for the committer, replaced first if stale (the generation's lock is
        taken only then: a generation being written holds it for seconds)."""
        if self._lanes_stale or any(lane.failed for lane in self._lanes):
            async with self._gen_lock:
                await self._replace_stale_lanes()
        return self._lanes[0]

    async def fleet_state(self, control_topic_id: str | None) -> FleetState:
        """Where the table stands for the fleet (the committer's start), read by the first lane."""
        state: FleetState = (await (await self._first_lane()).fleet_state(control_topic_id))[1]
        return state

    async def commit_fleet(self, sets: Sequence[FileSet], control: ControlRange) -> FleetOutcome:
        """The committer's commit of ``sets`` (``commits.commit_fleet``), in the first lane."""
        outcome: FleetOutcome = (await (await self._first_lane()).commit_fleet(sets, control))[1]
        return outcome

    async def _age_timer(self) -> None:
        """Commit a generation once it is ``max_file_age_s`` old, however quiet the traffic."""
        await age_timer(
            self.max_file_age_s,
            lambda: None if self._gen is None or self._failure else self._gen.started,
            self._gen_lock,
            self._commit,
            lambda: self._closed,
        )
