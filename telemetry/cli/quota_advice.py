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
kip714's own push quotas (``push_byte_rate``, ``push_decoded_byte_rate``)
are advised from the ``push_bytes`` and ``push_decoded_bytes`` columns of
the ``metrics`` table when it has them (each push once, at its
``received_time``, replayed push by push as the enforcement records it).

Each observed (user, client-id) pair gets its own advice (Kafka's most
specific entity); the user is the principal's name (``User:alice`` ->
``alice``). So do the entities one quota could govern several clients by:
``<default>`` users and client-ids and the user-only and client-id-only
levels, each resolved to the sensors it would create by
``quotas.entity.quota_metric_tags`` (Kafka's precedence): a quota set on
``/users/<default>`` is one sensor per user, shared by that user's clients,
while ``/users/<default>/clients/<default>`` is one per client.

Kafka quotas are printed as ``kafka-configs.sh`` commands and never
applied: kip714 is not the cluster. kip714's own push quotas are set with
``--apply`` through the HTTP admin API (``telemetry.admin.admin_client``,
what ``kip714 quotas --http`` uses) and read back, so an operator sees the
change in force rather than trusting the request.
"""

from __future__ import annotations

import argparse
import datetime as dt
import heapq
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from quotas import (
    DEFAULT,
    DemandEvent,
    Quota,
    QuotaEntity,
    ReplayResult,
    headroom_quotas,
    replay,
    sanitize,
    split_budget,
)
from quotas.entity import quota_limit, quota_metric_tags
from report.cli import iso_time
from telemetry.cli.common import HelpFormatter, add_location, location_of
from telemetry.cli.quota_apply import entity_args, set_push_quotas

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "KIP714_QUOTAS",
    "RATE_METRICS",
    "Demand",
    "EntityAdvice",
    "advise",
    "build_parser",
    "demand_of",
    "main",
]

#: The pushed rate -> the Kafka quota it is the demand of.
RATE_METRICS: Final = {
    "org.apache.kafka.producer.outgoing.byte.rate": "producer_byte_rate",
    "org.apache.kafka.consumer.incoming.byte.rate": "consumer_byte_rate",
}
#: The metrics table's push-size column -> the kip714 quota it is the demand of.
KIP714_QUOTAS: Final = {
    "push_bytes": "push_byte_rate",
    "push_decoded_bytes": "push_decoded_byte_rate",
}
#: Every KIP-714 client pushes these: they list the clients that pushed no rate.
_EVERY_CLIENT: Final = (
    "org.apache.kafka.producer.connection.creation.rate",
    "org.apache.kafka.consumer.connection.creation.rate",
)
_SECOND_MS: Final = 1000
#: As ``kip714 quotas`` (``telemetry.admin.cli``): the admin token's environment variable.
TOKEN_ENVIRONMENT: Final = "KIP714_ADMIN_TOKEN"

Entity = tuple[str, str, str]  # (quota, user, client-id): an observed client
#: (quota, user, client-id) of an advised entity: ``None`` = not part of it, or ``DEFAULT``.
Advised = tuple[str, str | None, str | None]
Sensor = tuple[str, str]  # the (user, client-id) tags of one sensor


@dataclass(slots=True)
class Demand:
    """Per entity, window start (ms) -> bytes/s: each instance's mean rate, summed."""

    window_ms: int
    by_entity: dict[Entity, dict[int, float]] = field(default_factory=dict)
    silent: dict[tuple[str, str], str] = field(default_factory=dict)
    """(user, client-id) of clients that pushed no rate -> their software."""
    events: dict[Entity, list[DemandEvent]] = field(default_factory=dict)
    """The observed pushes (bytes at their time) of kip714's own quotas' entities."""

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
    rate_rows: Iterable[dict[str, Any]],
    client_rows: Iterable[dict[str, Any]],
    window_ms: int,
    push_rows: Iterable[dict[str, Any]] = (),
) -> Demand:
    """Rows of ``time, principal, client_id, client_instance_id, metric_name, value``, and
    rows of ``received_time, principal, client_id, client_instance_id, push_bytes,
    push_decoded_bytes`` (every row of a push repeats its sizes: each push counts once)."""
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
    _push_demand(demand, push_rows)
    measured = {(user, client) for kind, user, client in demand.by_entity if kind in _KAFKA}
    for row in client_rows:
        pair = (user_of(row.get("principal")), row.get("client_id") or "")
        if pair not in measured:
            software = f"{row.get('client_software_name') or '?'} "
            demand.silent[pair] = software + (row.get("client_software_version") or "")
    return demand


_KAFKA: Final = frozenset(RATE_METRICS.values())


def _push_demand(demand: Demand, push_rows: Iterable[dict[str, Any]]) -> None:
    seen: set[tuple[str, dt.datetime]] = set()
    events: dict[Entity, list[DemandEvent]] = defaultdict(list)
    for row in push_rows:
        if row.get("received_time") is None or all(row.get(c) is None for c in KIP714_QUOTAS):
            continue  # rows landed before the sizes were (an earlier version's)
        push = (str(row.get("client_instance_id")), row["received_time"])
        if push in seen:  # another row of a push already counted
            continue
        seen.add(push)
        at_ms = _ms(row["received_time"])
        user, client = user_of(row.get("principal")), row.get("client_id") or ""
        for column, kind in KIP714_QUOTAS.items():
            size = row.get(column)
            if size is not None:
                events[(kind, user, client)].append(DemandEvent(at_ms, float(size)))
    seconds = demand.window_ms / _SECOND_MS
    for entity, observed in events.items():
        observed.sort(key=lambda event: event.at_ms)
        demand.events[entity] = observed
        windows = demand.by_entity.setdefault(entity, {})
        for event in observed:
            start = event.at_ms // demand.window_ms * demand.window_ms
            windows[start] = windows.get(start, 0.0) + event.value / seconds


@dataclass(frozen=True, slots=True)
class EntityAdvice:
    entity: Advised
    peak: float
    """The highest rate of one of its sensors in one window."""
    proposal: float
    replayed: ReplayResult
    """For an entity of several sensors: the worst-throttled one's share, and the longest
    throttle of any."""
    precedence: int = 1
    """Kafka's order of the entity (1 = /users/U/clients/C ... 8 = /clients/<default>)."""
    sensors: int = 1
    """How many sensors the quota would create over the observed clients."""


#: The entities one quota can govern several clients by, in Kafka's order (2..8).
#: ``"U"``/``"C"``: one entity per observed user / client-id that has several clients.
_SHARED: Final[tuple[tuple[str | None, str | None, int], ...]] = (
    ("U", DEFAULT, 2),
    ("U", None, 3),
    (DEFAULT, "C", 4),
    (DEFAULT, DEFAULT, 5),
    (DEFAULT, None, 6),
    (None, "C", 7),
    (None, DEFAULT, 8),
)


def advise(
    demand: Demand, headroom: float, budget: float | None = None
) -> tuple[list[EntityAdvice], list[str]]:
    """Per quota: one advice per observed client (worst peak first), then the shared and
    default entities in Kafka's order; and the budget arithmetic's lines."""
    advice: list[EntityAdvice] = []
    arithmetic: list[str] = []
    for quota in sorted({entity[0] for entity in demand.by_entity}):
        entities = [e for e in demand.by_entity if e[0] == quota]
        peaks = {"\0".join(e): demand.peak(e) for e in entities}
        if budget is None:
            proposals = headroom_quotas(peaks, headroom)
            scale = headroom
        else:
            split = split_budget(peaks, demand.concurrent_peak(quota), budget)
            proposals = split.quotas
            scale = split.scale
            arithmetic += [
                f"{quota}: budget B = {_rate(budget)} B/s; the clients' concurrent peak "
                f"P = {_rate(split.concurrent_peak)} B/s; each quota = peak x B/P = peak x "
                f"{split.scale:.3f}; the quotas add up to {_rate(sum(proposals.values()))} B/s, "
                f"{split.over_allocation:.2f} x B (sum of peaks {_rate(split.sum_of_peaks)} / P): "
                "over-allocated because they did not all peak together; a shared or default "
                "entity's quota = its busiest sensor's peak x B/P",
            ]
        exact: list[EntityAdvice] = []
        for entity in entities:
            proposal = proposals["\0".join(entity)]
            replayed = _replay(demand, [entity], proposal)
            exact.append(EntityAdvice(entity, demand.peak(entity), proposal, replayed))
        exact.sort(key=lambda a: (-a.peak, a.entity))
        advice += exact
        advice += _shared_advice(demand, quota, entities, scale)
    return advice, arithmetic


def _shared_advice(
    demand: Demand, quota: str, entities: list[Entity], scale: float
) -> list[EntityAdvice]:
    """The entities that would govern several of ``entities`` with one quota."""
    users: dict[str, set[str]] = defaultdict(set)
    clients: dict[str, set[str]] = defaultdict(set)
    for _, observed_user, observed_client in entities:
        users[observed_user].add(observed_client)
        clients[observed_client].add(observed_user)
    found: list[EntityAdvice] = []
    for user_part, client_part, precedence in _SHARED:
        if user_part == "U":
            named: list[tuple[str | None, str | None]] = [
                (name, client_part) for name in sorted(users) if len(users[name]) > 1
            ]
        elif client_part == "C":
            named = [(user_part, name) for name in sorted(clients) if len(clients[name]) > 1]
        else:
            named = [(user_part, client_part)]
        for user, client in named:
            sensors = _sensors(QuotaEntity.of(user, client), entities)
            if not sensors:
                continue
            peaks = {tags: _peak(demand, members) for tags, members in sensors.items()}
            peak = max(peaks.values())
            proposal = peak * scale
            replays = [_replay(demand, members, proposal) for members in sensors.values()]
            worst = max(replays, key=lambda r: (r.throttled_fraction, r.max_throttle_ms))
            replayed = ReplayResult(
                sum(r.events for r in replays),
                sum(r.throttled_events for r in replays),
                worst.throttled_ms,
                worst.period_ms,
                max(r.max_throttle_ms for r in replays),
            )
            found.append(
                EntityAdvice(
                    (quota, user, client), peak, proposal, replayed, precedence, len(sensors)
                )
            )
    return found


def _sensors(entity: QuotaEntity, observed: list[Entity]) -> dict[Sensor, list[Entity]]:
    """The observed clients ``entity``'s quota would govern, by the sensor each records into.

    Resolved as if ``entity`` were the only quota configured: a more specific
    quota set beside it wins for its clients (Kafka's precedence).
    """
    overrides = {entity: Quota.upper_bound(1.0)}
    sensors: dict[Sensor, list[Entity]] = defaultdict(list)
    for observed_entity in observed:
        _, user, client = observed_entity
        tags = quota_metric_tags(overrides, entity.quota_type, sanitize(user), client)
        if quota_limit(overrides, *tags) is not None:
            sensors[tags].append(observed_entity)
    return dict(sensors)


def _summed(demand: Demand, members: list[Entity]) -> dict[int, float]:
    """The members' rates per window, added: the demand of the one sensor they share."""
    if len(members) == 1:
        return demand.by_entity[members[0]]
    total: dict[int, float] = defaultdict(float)
    for member in members:
        for start, rate in demand.by_entity[member].items():
            total[start] += rate
    return dict(total)


def _peak(demand: Demand, members: list[Entity]) -> float:
    return max(_summed(demand, members).values(), default=0.0)


def _replay(demand: Demand, members: list[Entity], quota: float) -> ReplayResult:
    """The members' demand through Kafka's quota algorithm, as one sensor.

    Observed pushes are replayed as they came; a pushed rate as one record a
    second of each window's rate.
    """
    windows = _summed(demand, members)
    window_ms = demand.window_ms
    start, end = min(windows), max(windows) + window_ms
    if quota <= 0:  # nothing observed: no quota can be proposed above zero demand
        return ReplayResult(0, 0, 0, end - start, 0)
    if all(member in demand.events for member in members):
        events: Iterable[DemandEvent] = heapq.merge(
            *(demand.events[m] for m in members), key=lambda event: event.at_ms
        )
    else:
        events = (
            DemandEvent(at, windows[first])
            for first in sorted(windows)
            for at in range(first, first + window_ms, _SECOND_MS)
        )
    return replay(events, quota, start_ms=start, end_ms=end)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip714 quotas advise",
        description="Propose a byte-rate quota per quota entity from the demand the lake "
        "observed, by KIP-599's method (the observed peak x --headroom, or --budget divided "
        "among the clients), and replay the observed demand through Kafka's quota algorithm "
        "to show how often each proposal would have throttled. Entities: every observed "
        "(user, client-id), then the user-only, client-id-only and <default> entities that "
        "would govern several clients with one quota (Kafka's precedence). Kafka quotas "
        "(producer_byte_rate, consumer_byte_rate, from the rates Java clients push): prints "
        "kafka-configs.sh commands, never applies them. kip714's own push quotas "
        "(push_byte_rate, push_decoded_byte_rate, from the push sizes in the lake): prints "
        "what it would set; with --apply --http URL sets them through the admin API and reads "
        "them back.",
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
    parser.add_argument(
        "--http",
        metavar="URL",
        help="kip714's HTTP listener, e.g. http://127.0.0.1:8714: where --apply sets kip714's "
        "own push quotas (default: none; the dry run names http://127.0.0.1:8714)",
    )
    parser.add_argument(
        "--token",
        help=f"the HTTP admin API's bearer token (default: ${TOKEN_ENVIRONMENT})",
    )
    parser.add_argument(
        "--apply",
        action="store_true",
        help="set kip714's own push quotas through --http and read them back (without it: "
        "a dry run that prints what it would set)",
    )
    parser.add_argument(
        "--level",
        type=int,
        choices=range(1, 9),
        default=1,
        metavar="1-8",
        help="which entities' push quota proposals the dry run prints and --apply sets, by "
        "Kafka's precedence (default: 1, each (user, client-id); 5 = "
        "/users/<default>/clients/<default>, 6 = /users/<default>, 8 = /clients/<default>; "
        "see docs/quotas.md)",
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
    if args.apply and not args.http:
        print("kip714 quotas advise: --apply needs --http URL", file=sys.stderr)
        return 2
    from telemetry.cli.lake import lake_rows  # noqa: PLC0415 - pyiceberg loads only here

    config, data_dir = location_of(args)
    span = (args.start, args.end)
    rates = lake_rows(config, data_dir, list(RATE_METRICS), span, _RATE_COLUMNS_ALL)
    if rates is None:
        return 2
    clients = lake_rows(config, data_dir, list(_EVERY_CLIENT), span, _CLIENT_COLUMNS) or []
    pushes = lake_rows(
        config, data_dir, None, span, _PUSH_COLUMNS, time_column="received_time", missing_ok=True
    )
    demand = demand_of(rates, clients, args.window_s * _SECOND_MS, pushes or [])
    advice, arithmetic = advise(demand, args.headroom, args.budget)
    _print(advice, arithmetic, demand, args)
    changes = _kip714_changes(advice, args.level)
    token = args.token or os.environ.get(TOKEN_ENVIRONMENT)
    return set_push_quotas(changes, args.http, token, apply=args.apply, level=args.level)


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
_PUSH_COLUMNS: Final = (
    "received_time",
    "principal",
    "client_id",
    "client_instance_id",
    *KIP714_QUOTAS,
)


def _print(
    advice: list[EntityAdvice], arithmetic: list[str], demand: Demand, args: argparse.Namespace
) -> None:
    basis = f"budget {_rate(args.budget)} B/s" if args.budget else f"headroom {args.headroom}"
    observed = sum(1 for item in advice if item.precedence == 1)
    print(
        f"kip714 quotas advise: {observed} quota entities with an observed rate, "
        f"{len(demand.silent)} without, {len(advice) - observed} shared or default; {basis}; "
        f"demand per {args.window_s} s window"
    )
    if not any(entity[0] in KIP714_QUOTAS.values() for entity in demand.by_entity):
        print(
            "kip714's own push quotas: no push sizes (push_bytes, push_decoded_bytes) in the "
            "lake for this range"
        )
    header = (
        "quota", "user", "client-id", "peak B/s", "proposal B/s", "throttled", "worst ms",
        "precedence", "sensors",
    )  # fmt: skip
    lines: list[tuple[str, ...]] = [header]
    for item in advice:
        kind, user, client = item.entity
        throttled = f"{item.replayed.throttled_fraction:.1%}"
        lines.append(
            (kind, _part(user), _part(client), _rate(item.peak), _rate(item.proposal), throttled,
             f"{item.replayed.max_throttle_ms:,}", str(item.precedence), str(item.sensors))
        )  # fmt: skip
    for (user, client), software in sorted(demand.silent.items()):
        lines.append(
            (
                "-",
                user,
                client,
                "no observed rate",
                f"({software} pushes no byte rate)",
                "",
                "",
                "",
                "",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for cells in lines:
        text = "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
        print(text.rstrip())
    for sentence in arithmetic:
        print(sentence)
    for item in advice:
        kind, user, client = item.entity
        if kind in _KAFKA:
            print(
                f"kafka-configs.sh --bootstrap-server {args.bootstrap_server} --alter "
                f"--add-config {kind}={round(item.proposal)} {entity_args(user, client)}"
            )


def _part(name: str | None) -> str:
    return "-" if name is None else name


def _kip714_changes(
    advice: list[EntityAdvice], level: int
) -> dict[tuple[str | None, str | None], dict[str, float]]:
    """(user, client-id) -> kip714's push quotas to set there: ``level``'s proposals."""
    changes: dict[tuple[str | None, str | None], dict[str, float]] = {}
    for item in advice:
        kind, user, client = item.entity
        if kind in KIP714_QUOTAS.values() and item.precedence == level:
            changes.setdefault((user, client), {})[kind] = float(max(1, round(item.proposal)))
    return changes


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)
