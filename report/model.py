"""What the report shows, computed from rollup rows only.

The fleet first: the inventory (``client_inventory_1h``: who pushed, from
which software, principal and ingest node), each client's health state (the
worst severity among the health rules it fired, ``client_alerts_1h``) and
the alerts of the period, worst first. Then one section per client: its
health line (``client_health_1h`` summed over the range), its own alerts
and charts from the finest gauge rollup (``gauges_<w>``), chosen by client
type. Clients are ordered by state, then worst request latency p99. And
the quota advice (``quota_advice_1h``): each quota entity's demand over the
period and the proposal from its peak.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from health_rules import SEVERITIES
from report.ids import is_librdkafka, librdkafka_form
from report.svg import PALETTE, Series

if TYPE_CHECKING:
    import pyarrow as pa

    from health_rules import RuleSet

__all__ = [
    "CHARTS",
    "GAUGE_METRICS",
    "HEALTHY",
    "STATES",
    "Alert",
    "Chart",
    "ChartSpec",
    "ClientReport",
    "Fleet",
    "QuotaAdviceLine",
    "build",
]

HEALTHY: Final = "healthy"
#: Health states, worst first: a client's is the worst severity of the alerts it fired.
STATES: Final = (*reversed(SEVERITIES), HEALTHY)


@dataclass(frozen=True, slots=True)
class ChartSpec:
    title: str
    unit: str
    lines: tuple[tuple[str, str, str], ...]  # (label, metric suffix, gauge rollup column)
    meaning: str


_P99 = (
    "per window: the {p} of the client's pushed node.request.latency.avg values (each its "
    "average request latency over one push interval), at the broker where it is worst"
)
_REQUEST_LATENCY = ChartSpec(
    "Request latency",
    "ms",
    (("p50", "node.request.latency.avg", "p50"), ("p99", "node.request.latency.avg", "p99")),
    _P99.format(p="median (p50) and 99th percentile (p99)"),
)
_CONNECTIONS = ChartSpec(
    "Connection creation rate",
    "/s",
    (("avg", "connection.creation.rate", "avg"),),
    "per window: the mean of the client's connection.creation.rate (connect attempts per second, "
    "librdkafka counts attempts that open no socket too)",
)
CHARTS: Final[dict[str, tuple[ChartSpec, ...]]] = {
    "producer": (
        _REQUEST_LATENCY,
        ChartSpec(
            "Queue time",
            "ms",
            (("avg", "record.queue.time.avg", "avg"), ("max", "record.queue.time.max", "max")),
            "per window: mean of record.queue.time.avg and max of record.queue.time.max "
            "(how long records waited in the producer before a send)",
        ),
        ChartSpec(
            "Produce throttle time",
            "ms",
            (
                ("avg", "produce.throttle.time.avg", "avg"),
                ("max", "produce.throttle.time.max", "max"),
            ),
            "per window: mean and max of the throttle time brokers asked (a quota biting: "
            "above zero means the broker delayed this client)",
        ),
        _CONNECTIONS,
    ),
    "consumer": (
        _REQUEST_LATENCY,
        ChartSpec(
            "Fetch latency",
            "ms",
            (
                ("avg", "fetch.manager.fetch.latency.avg", "avg"),
                ("max", "fetch.manager.fetch.latency.max", "max"),
            ),
            "per window: mean of fetch.manager.fetch.latency.avg and max of its .max",
        ),
        ChartSpec(
            "Rebalance latency",
            "ms",
            (
                ("avg", "coordinator.rebalance.latency.avg", "avg"),
                ("max", "coordinator.rebalance.latency.max", "max"),
            ),
            "per window: mean and max of the time the group's rebalances took",
        ),
        ChartSpec(
            "Poll idle ratio",
            "",
            (("avg", "poll.idle.ratio.avg", "avg"),),
            "per window: mean of poll.idle.ratio.avg (near 0: the application spends its time "
            "processing records between polls, a starving consumer)",
        ),
        _CONNECTIONS,
    ),
}
_ANY_CLIENT: Final = (_REQUEST_LATENCY, _CONNECTIONS)  # a client of no known type
GAUGE_METRICS: Final = tuple(
    sorted(
        {
            f"org.apache.kafka.{kind}.{suffix}"
            for kind, specs in CHARTS.items()
            for spec in specs
            for _, suffix, _ in spec.lines
        }
    )
)
_GAUGE_COLUMNS: Final = {
    (suffix, column) for specs in CHARTS.values() for s in specs for _, suffix, column in s.lines
}


@dataclass(slots=True)
class Chart:
    title: str
    unit: str
    meaning: str
    series: list[Series]


@dataclass(frozen=True, slots=True)
class Alert:
    """One ``client_alerts_1h`` row: a rule a client fired in one hour."""

    severity: str
    rule: str
    client_id: str | None
    client_instance_id: str
    window_start: dt.datetime
    first_fired: dt.datetime
    last_fired: dt.datetime
    value: float | None
    threshold: float | None
    meaning: str

    @property
    def rank(self) -> int:
        return STATES.index(self.severity) if self.severity in STATES else len(STATES)


@dataclass(slots=True)
class ClientReport:
    client_instance_id: str
    client_id: str | None = None
    client_type: str | None = None
    software_name: str | None = None
    software_version: str | None = None
    principal: str | None = None
    ingest_node: str | None = None
    pushes: int | None = None
    points: int | None = None
    hours: int = 0
    latency_avg_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_max_ms: float | None = None
    queue_avg_ms: float | None = None
    throttle_max_ms: float | None = None
    connection_rate: float | None = None
    connections_created: int | None = None
    alerts: list[Alert] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    means_of: dict[str, int] = field(default_factory=dict)  # hourly rows behind each mean

    @property
    def software(self) -> str | None:
        if not self.software_name:
            return None
        return f"{self.software_name} {self.software_version or ''}".strip()

    @property
    def librdkafka_instance_id(self) -> str | None:
        """The id as librdkafka logs it, for librdkafka clients only."""
        if not is_librdkafka(self.software_name, self.software_version):
            return None
        return librdkafka_form(self.client_instance_id)

    @property
    def state(self) -> str:
        return min((a.severity for a in self.alerts), key=STATES.index, default=HEALTHY)

    @property
    def worst_p99(self) -> float:
        return self.latency_p99_ms if self.latency_p99_ms is not None else -math.inf


@dataclass(frozen=True, slots=True)
class InventoryLine:
    """Clients of one (type, software name, version) or one (principal, ingest node)."""

    key: tuple[str, ...]
    instances: int
    pushes: int | None


@dataclass(frozen=True, slots=True)
class QuotaAdviceLine:
    """One quota entity over the period, from its ``quota_advice_1h`` hours."""

    quota: str
    user: str
    client_id: str
    peak_byte_rate: float
    """The busiest minute of any hour."""
    mean_byte_rate: float
    """Over every minute with demand (each hour's mean weighted by its minutes)."""
    headroom: float
    proposal_byte_rate: float
    """The period's peak x the headroom."""
    hours: int


@dataclass(slots=True)
class Fleet:
    clients: list[ClientReport]
    alerts: list[Alert]
    window: str | None = None  # the chart rollup's window length, e.g. "2s"
    quota_advice: list[QuotaAdviceLine] | None = None
    """``None``: no ``quota_advice_1h`` table was read."""

    def states(self) -> dict[str, int]:
        """Clients per health state, every state listed (zero included), worst first."""
        counts = dict.fromkeys(STATES, 0)
        for client in self.clients:
            counts[client.state] += 1
        return counts

    def by_software(self) -> list[InventoryLine]:
        return _group(
            self.clients,
            lambda c: (c.client_type or "-", c.software_name or "-", c.software_version or "-"),
        )

    def by_principal(self) -> list[InventoryLine]:
        return _group(self.clients, lambda c: (c.principal or "-", c.ingest_node or "-"))


def _group(clients: list[ClientReport], key: Any) -> list[InventoryLine]:
    groups: dict[tuple[str, ...], list[ClientReport]] = {}
    for client in clients:
        groups.setdefault(key(client), []).append(client)
    lines = []
    for group_key, members in groups.items():
        counted = [c.pushes for c in members if c.pushes is not None]
        lines.append(InventoryLine(group_key, len(members), sum(counted) if counted else None))
    return sorted(lines, key=lambda line: (-line.instances, line.key))


def build(
    *,
    inventory: pa.Table | None = None,
    health: pa.Table | None = None,
    alerts: pa.Table | None = None,
    gauges: pa.Table | None = None,
    rules: RuleSet | None = None,
    window: str | None = None,
    quota_advice: pa.Table | None = None,
) -> Fleet:
    """The fleet from whichever tables exist; every client found in any of them is shown."""
    clients: dict[str, ClientReport] = {}
    for row in _rows(inventory):
        client = _client(clients, row)
        _fold_inventory(client, row)
    for row in _rows(health):
        client = _client(clients, row)
        client.client_type = client.client_type or row.get("client_type")
        client.hours += 1
        _fold_health(client, row)
    meanings = {rule.name: rule.meaning for rule in rules.rules} if rules is not None else {}
    fired = [_alert(row, meanings) for row in _rows(alerts)]
    for alert in fired:
        _client(clients, {"client_instance_id": alert.client_instance_id}).alerts.append(alert)
    points = _gauge_points(gauges, clients)
    for instance_id, client in clients.items():
        specs = CHARTS.get(client.client_type or "", _ANY_CLIENT)
        client.charts = [
            Chart(
                spec.title,
                spec.unit,
                spec.meaning,
                [
                    Series(label, PALETTE[i], tuple(points.get((instance_id, suffix, column), ())))
                    for i, (label, suffix, column) in enumerate(spec.lines)
                ],
            )
            for spec in specs
        ]
        client.alerts.sort(key=_alert_order)
    ordered = sorted(clients.values(), key=_client_order)
    advice = None if quota_advice is None else _quota_advice(_rows(quota_advice))
    return Fleet(ordered, sorted(fired, key=_alert_order), window, advice)


def _quota_advice(rows: list[dict[str, Any]]) -> list[QuotaAdviceLine]:
    """The hours of each (quota, user, client-id) folded into one line, worst peak first."""
    hours: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        key = (str(row["quota"]), str(row["user"]), str(row["client_id"]))
        hours.setdefault(key, []).append(row)
    lines = []
    for (quota, user, client_id), found in hours.items():
        peak = max(float(r["peak_byte_rate"]) for r in found)
        minutes = sum(int(r["minutes"]) for r in found)
        mean = sum(float(r["mean_byte_rate"]) * int(r["minutes"]) for r in found) / minutes
        headroom = max(float(r["headroom"]) for r in found)
        lines.append(
            QuotaAdviceLine(
                quota, user, client_id, peak, mean, headroom, peak * headroom, len(found)
            )
        )
    return sorted(lines, key=lambda line: (line.quota, -line.peak_byte_rate, line.user))


def _client_order(client: ClientReport) -> tuple[int, float, str, str]:
    """Worst state first, then the worst request latency p99."""
    state = STATES.index(client.state)
    return (state, -client.worst_p99, client.client_id or "", client.client_instance_id)


def _alert_order(alert: Alert) -> tuple[int, float, str, str]:
    """Worst severity first, then the latest fired first."""
    return (alert.rank, -alert.last_fired.timestamp(), alert.rule, alert.client_instance_id)


def _rows(table: pa.Table | None) -> list[dict[str, Any]]:
    return table.to_pylist() if table is not None else []


def _client(clients: dict[str, ClientReport], row: dict[str, Any]) -> ClientReport:
    instance_id = str(row["client_instance_id"])
    client = clients.get(instance_id)
    if client is None:
        client = clients[instance_id] = ClientReport(instance_id)
    client.client_id = row.get("client_id") or client.client_id
    if row.get("client_software_name"):
        client.software_name = row["client_software_name"]
        client.software_version = row.get("client_software_version")
    return client


def _fold_inventory(client: ClientReport, row: dict[str, Any]) -> None:
    client.client_type = row.get("client_type") or client.client_type
    client.principal = row.get("principal") or client.principal
    client.ingest_node = row.get("ingest_node") or client.ingest_node
    client.pushes = (client.pushes or 0) + int(row.get("pushes") or 0)
    client.points = (client.points or 0) + int(row.get("points") or 0)


def _fold_health(client: ClientReport, row: dict[str, Any]) -> None:
    """Add one hourly health row: worst of the worsts, running mean of the means."""
    client.latency_p99_ms = _max(client.latency_p99_ms, row.get("request_latency_p99_ms"))
    client.latency_max_ms = _max(client.latency_max_ms, row.get("request_latency_max_ms"))
    client.throttle_max_ms = _max(client.throttle_max_ms, row.get("throttle_time_max_ms"))
    client.latency_avg_ms = _mean(client, client.latency_avg_ms, row, "request_latency_avg_ms")
    client.queue_avg_ms = _mean(client, client.queue_avg_ms, row, "queue_time_avg_ms")
    client.connection_rate = _mean(client, client.connection_rate, row, "connection_creation_rate")
    created = row.get("connections_created")
    if created is not None:
        client.connections_created = (client.connections_created or 0) + round(float(created))


def _alert(row: dict[str, Any], meanings: dict[str, str]) -> Alert:
    rule = str(row["rule"])
    return Alert(
        severity=str(row["severity"]),
        rule=rule,
        client_id=row.get("client_id"),
        client_instance_id=str(row["client_instance_id"]),
        window_start=row["window_start"],
        first_fired=_utc(row["first_fired"]),
        last_fired=_utc(row["last_fired"]),
        value=row.get("value"),
        threshold=row.get("threshold"),
        meaning=meanings.get(rule, ""),
    )


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _gauge_points(
    gauges: pa.Table | None, clients: dict[str, ClientReport]
) -> dict[tuple[str, str, str], list[tuple[dt.datetime, float]]]:
    """(instance, metric suffix, column) -> time-ordered points, worst broker per window."""
    worst: dict[tuple[str, str, str], dict[dt.datetime, float]] = {}
    if gauges is None:
        return {}
    columns = ["window_start", "metric_name", "client_instance_id", "client_id", "p50", "p99"]
    columns += ["avg", "max", "client_software_name", "client_software_version"]
    for row in gauges.select([c for c in columns if c in gauges.column_names]).to_pylist():
        kind, _, suffix = str(row["metric_name"]).removeprefix("org.apache.kafka.").partition(".")
        client = _client(clients, row)
        client.client_type = client.client_type or kind
        for column in ("p50", "p99", "avg", "max"):
            value = row.get(column)
            if value is None or (suffix, column) not in _GAUGE_COLUMNS:
                continue
            per_window = worst.setdefault((client.client_instance_id, suffix, column), {})
            start = row["window_start"]
            per_window[start] = max(per_window.get(start, -math.inf), float(value))
    return {key: sorted(values.items()) for key, values in worst.items()}


def _max(current: float | None, value: Any) -> float | None:
    if value is None:
        return current
    return float(value) if current is None else max(current, float(value))


def _mean(
    client: ClientReport, current: float | None, row: dict[str, Any], column: str
) -> float | None:
    """The running mean over the rows that have ``column`` (a missing value is not a zero)."""
    value = row.get(column)
    if value is None:
        return current
    n = client.means_of[column] = client.means_of.get(column, 0) + 1
    if current is None:
        return float(value)
    return current + (float(value) - current) / n
