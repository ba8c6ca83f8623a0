"""``kip714 quotas advise``: a Kafka quota per client, from the demand the lake observed.

KIP-599's method (``quotas.proposal``): the worst case observed times a
headroom, or a cluster budget divided among the tenants; each proposal is
then checked by replaying the observed demand through ``quotas.replay``,
the same ``ClientQuotaManager`` the enforcement runs.

The demand is what the clients push about themselves: Java clients push
``org.apache.kafka.producer.outgoing.byte.rate`` and
``org.apache.kafka.consumer.incoming.byte.rate`` (bytes per second, over
the client's own sample window; checked on a real Java producer and
consumer), the traffic ``producer_byte_rate`` and ``consumer_byte_rate``
limit. librdkafka pushes no byte rate (``shared/data/librdkafka-2.16-*``):
for those clients the advice says "no observed rate" rather than guessing.
The quota entity is the (user, client-id) pair, the most specific one in
Kafka's precedence; the user is the principal's name (``User:alice`` ->
``alice``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from quotas import DemandEvent, ReplayResult, headroom_quotas, replay, split_budget
from report.cli import iso_time
from telemetry.cli.common import HelpFormatter, add_location, location_of

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["RATE_METRICS", "Demand", "EntityAdvice", "advise", "build_parser", "main"]

#: The pushed rate -> the Kafka quota it is the demand of.
RATE_METRICS: Final = {
    "org.apache.kafka.producer.outgoing.byte.rate": "producer_byte_rate",
    "org.apache.kafka.consumer.incoming.byte.rate": "consumer_byte_rate",
}
#: Every KIP-714 client pushes these: they list the clients that pushed no rate.
_EVERY_CLIENT: Final = (
    "org.apache.kafka.producer.connection.creation.rate",
    "org.apache.kafka.consumer.connection.creation.rate",
)
_SECOND_MS: Final = 1000

Entity = tuple[str, str, str]  # (quota, user, client-id)


@dataclass(slots=True)
class Demand:
    """Per entity, window start (ms) -> bytes/s: each instance's mean rate, summed."""

    window_ms: int
    by_entity: dict[Entity, dict[int, float]] = field(default_factory=dict)
    silent: dict[tuple[str, str], str] = field(default_factory=dict)
    """(user, client-id) of clients that pushed no rate -> their software."""

    def peak(self, entity: Entity) -> float:
        return max(self.by_entity[entity].values(), default=0.0)

    def concurrent_peak(self, quota: str) -> float:
        """The highest total demand of one quota's entities in one window."""
        totals: dict[int, float] = defaultdict(float)
        for (kind, _, _), windows in self.by_entity.items():
            if kind == quota:
                for start, rate in windows.items():
                    totals[start] += rate
        return max(totals.values(), default=0.0)


def user_of(principal: str | None) -> str:
    """Kafka's quota user: the principal's name (``User:alice`` -> ``alice``)."""
    if not principal:
        return "ANONYMOUS"
    return principal.split(":", 1)[1] if ":" in principal else principal


def demand_of(
    rate_rows: Iterable[dict[str, Any]], client_rows: Iterable[dict[str, Any]], window_ms: int
) -> Demand:
    """Rows of ``time, principal, client_id, client_instance_id, metric_name, value``."""
    per_instance: dict[tuple[Entity, str, int], list[float]] = defaultdict(list)
    for row in rate_rows:
        value = row.get("value")
        if value is None:
            continue
        entity = (
            RATE_METRICS[row["metric_name"]],
            user_of(row.get("principal")),
            row.get("client_id") or "",
        )
        start = _ms(row["time"]) // window_ms * window_ms
        per_instance[(entity, str(row["client_instance_id"]), start)].append(float(value))
    demand = Demand(window_ms)
    for (entity, _, start), values in per_instance.items():
        windows = demand.by_entity.setdefault(entity, {})
        windows[start] = windows.get(start, 0.0) + sum(values) / len(values)
    measured = {(user, client) for _, user, client in demand.by_entity}
    for row in client_rows:
        pair = (user_of(row.get("principal")), row.get("client_id") or "")
        if pair not in measured:
            software = f"{row.get('client_software_name') or '?'} "
            demand.silent[pair] = software + (row.get("client_software_version") or "")
    return demand


@dataclass(frozen=True, slots=True)
class EntityAdvice:
    entity: Entity
    peak: float
    proposal: float
    replayed: ReplayResult


def advise(
    demand: Demand, headroom: float, budget: float | None = None
) -> tuple[list[EntityAdvice], list[str]]:
    """One advice per entity (worst peak first), and the budget arithmetic's lines."""
    advice: list[EntityAdvice] = []
    arithmetic: list[str] = []
    for quota in sorted({entity[0] for entity in demand.by_entity}):
        entities = [e for e in demand.by_entity if e[0] == quota]
        peaks = {"\0".join(e): demand.peak(e) for e in entities}
        if budget is None:
            proposals = headroom_quotas(peaks, headroom)
        else:
            split = split_budget(peaks, demand.concurrent_peak(quota), budget)
            proposals = split.quotas
            arithmetic += [
                f"{quota}: budget B = {_rate(budget)} B/s; the clients' concurrent peak "
                f"P = {_rate(split.concurrent_peak)} B/s; each quota = peak x B/P = peak x "
                f"{split.scale:.3f}; the quotas add up to {_rate(sum(proposals.values()))} B/s, "
                f"{split.over_allocation:.2f} x B (sum of peaks {_rate(split.sum_of_peaks)} / P): "
                "over-allocated because they did not all peak together",
            ]
        for entity in entities:
            proposal = proposals["\0".join(entity)]
            replayed = _replay(demand.by_entity[entity], demand.window_ms, proposal)
            advice.append(EntityAdvice(entity, demand.peak(entity), proposal, replayed))
    advice.sort(key=lambda a: (-a.peak, a.entity))
    return advice, arithmetic


def _replay(windows: dict[int, float], window_ms: int, quota: float) -> ReplayResult:
    """The windows' rates as one record a second, through Kafka's quota algorithm."""
    start, end = min(windows), max(windows) + window_ms
    events = (
        DemandEvent(at, windows[first])
        for first in sorted(windows)
        for at in range(first, first + window_ms, _SECOND_MS)
    )
    if quota <= 0:  # nothing observed: no quota can be proposed above zero demand
        return ReplayResult(0, 0, 0, end - start, 0)
    return replay(events, quota, start_ms=start, end_ms=end)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip714 quotas advise",
        description="Propose a Kafka byte-rate quota per (user, client-id) from the rates the "
        "clients pushed, by KIP-599's method (the observed peak x --headroom, or --budget "
        "divided among them), and replay the observed demand through Kafka's quota algorithm "
        "to show how often each proposal would have throttled. Prints kafka-configs.sh "
        "commands; changes nothing.",
        formatter_class=HelpFormatter,
    )
    add_location([parser])
    parser.add_argument("--from", dest="start", type=iso_time, help="ISO-8601, UTC (default: all)")
    parser.add_argument("--to", dest="end", type=iso_time, help="ISO-8601, UTC, exclusive")
    parser.add_argument("--headroom", type=float, default=1.5, help="proposal = peak x this")
    parser.add_argument(
        "--budget",
        type=float,
        metavar="BYTES_PER_S",
        help="the cluster's budget for each quota, divided among the clients instead",
    )
    parser.add_argument(
        "--window-s", type=int, default=60, help="the demand's window: a mean rate per window"
    )
    parser.add_argument(
        "--bootstrap-server",
        default="BROKER:9092",
        help="what the printed kafka-configs.sh commands name",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.headroom < 1 or args.window_s < 1 or (args.budget is not None and args.budget <= 0):
        print(
            "kip714 quotas advise: --headroom must be at least 1, --window-s at least 1 and "
            "--budget positive",
            file=sys.stderr,
        )
        return 2
    from telemetry.cli.lake import lake_rows  # noqa: PLC0415 - pyiceberg loads only here

    config, data_dir = location_of(args)
    span = (args.start, args.end)
    rates = lake_rows(config, data_dir, list(RATE_METRICS), span, _RATE_COLUMNS_ALL)
    if rates is None:
        return 2
    clients = lake_rows(config, data_dir, list(_EVERY_CLIENT), span, _CLIENT_COLUMNS) or []
    demand = demand_of(rates, clients, args.window_s * _SECOND_MS)
    advice, arithmetic = advise(demand, args.headroom, args.budget)
    _print(advice, arithmetic, demand, args)
    return 0


_RATE_COLUMNS_ALL: Final = (
    "time",
    "principal",
    "client_id",
    "client_instance_id",
    "metric_name",
    "value",
)
_CLIENT_COLUMNS: Final = (
    "principal",
    "client_id",
    "client_software_name",
    "client_software_version",
)


def _print(
    advice: list[EntityAdvice], arithmetic: list[str], demand: Demand, args: argparse.Namespace
) -> None:
    basis = f"budget {_rate(args.budget)} B/s" if args.budget else f"headroom {args.headroom}"
    print(
        f"kip714 quotas advise: {len(advice)} quota entities with an observed rate, "
        f"{len(demand.silent)} without; {basis}; demand per {args.window_s} s window"
    )
    header = ("quota", "user", "client-id", "peak B/s", "proposal B/s", "throttled", "worst ms")
    lines: list[tuple[str, ...]] = [header]
    for item in advice:
        kind, user, client = item.entity
        throttled = f"{item.replayed.throttled_fraction:.1%}"
        lines.append(
            (kind, user, client, _rate(item.peak), _rate(item.proposal), throttled,
             f"{item.replayed.max_throttle_ms:,}")
        )  # fmt: skip
    for (user, client), software in sorted(demand.silent.items()):
        lines.append(("-", user, client, "no observed rate", f"({software} pushes none)", "", ""))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for cells in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)))
    for sentence in arithmetic:
        print(sentence)
    for item in advice:
        kind, user, client = item.entity
        print(
            f"kafka-configs.sh --bootstrap-server {args.bootstrap_server} --alter "
            f"--add-config {kind}={round(item.proposal)} --entity-type users --entity-name "
            f"{user} --entity-type clients --entity-name {client}"
        )


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)
