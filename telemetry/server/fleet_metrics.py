"""``kip714_landing_*`` of the fleet's commits: who commits, how often and how fast, what waits.

Read at scrape time from ``FleetCommits.stats`` (the committer's side, on
whichever node holds the control topic's partition) and from the landing
(this node's file sets waiting, the table's last fleet commit).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from exporters.iceberg.exporter import COMMIT_BUCKETS_S
from telemetry.server.self_metrics import cumulative_buckets

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client.core import Metric

    from telemetry.server.fleet_commits import FleetCommits

__all__ = ["FleetCollector"]


class FleetCollector(Collector):
    def __init__(self, fleet: FleetCommits) -> None:
        self.fleet = fleet

    def collect(self) -> Iterable[Metric]:
        stats, landing = self.fleet.stats, self.fleet.exporter
        yield GaugeMetricFamily(
            "kip714_landing_committer",
            "1 on the node that commits for the fleet (holds the control topic's partition).",
            value=1 if stats.committer else 0,
        )
        yield CounterMetricFamily(
            "kip714_landing_fleet_commits",
            "Fleet commits this node made as the committer (one snapshot each).",
            value=stats.commits,
        )
        latency = HistogramMetricFamily(
            "kip714_landing_fleet_commit_seconds",
            "Time of this node's fleet commits (the catalog's commit, in the landing's worker).",
        )
        counts = stats.commit_bucket_counts or [0] * (len(COMMIT_BUCKETS_S) + 1)
        buckets = cumulative_buckets(COMMIT_BUCKETS_S, counts)
        latency.add_metric([], buckets, stats.commit_seconds_total)
        yield latency
        pending = GaugeMetricFamily(
            "kip714_landing_file_sets_pending",
            "File sets waiting: accepted by this node as committer, not committed yet "
            '(role="committer"); published by this node, not in the table yet (role="worker").',
            labels=["role"],
        )
        pending.add_metric(["committer"], stats.sets_pending)
        pending.add_metric(["worker"], landing.file_sets_waiting)
        yield pending
        sets = CounterMetricFamily(
            "kip714_landing_file_sets",
            "File sets this node judged as committer: added to the table, or dropped (they did "
            "not continue the table; their files are orphans), or undecodable.",
            labels=["outcome"],
        )
        sets.add_metric(["added"], stats.sets_added)
        sets.add_metric(["dropped"], stats.sets_dropped)
        sets.add_metric(["undecodable"], stats.undecodable)
        yield sets
        yield CounterMetricFamily(
            "kip714_landing_committer_fenced",
            "Commits this node refused as committer because another had moved the table's "
            "control offset (it was a zombie); it read the table again.",
            value=stats.fenced,
        )
        last = landing.last_fleet_commit_ms
        if last is not None:
            yield GaugeMetricFamily(
                "kip714_landing_fleet_commit_age_seconds",
                "Seconds since the table's newest fleet commit (as this node last read it).",
                value=max(0.0, time.time() - last / 1000),
            )
