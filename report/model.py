"""What the report shows, computed from the rollup rows: one health line and four charts per client.

The health line sums a client's hourly ``client_health_1h`` rows over the
range (worst p99 and max, mean of the means, total connections). The
charts come from the per-minute gauge rollup (``gauges_1m``; ``gauges_1h``
when there is none): request latency p50/p99 of ``node.request.latency.avg``
(worst broker per window), queue time, throttle time and
``connection.creation.rate``. Clients are ordered worst p99 first.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from report.svg import PALETTE, Series

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CHARTS", "GAUGE_METRICS", "Chart", "ClientReport", "build"]

_KINDS: Final = ("producer", "consumer")
#: (chart title, unit, [(series label, metric suffix, rollup column)]).
CHARTS: Final = (
    (
        "Request latency",
        "ms",
        [("p50", "node.request.latency.avg", "p50"), ("p99", "node.request.latency.avg", "p99")],
    ),
    (
        "Queue time",
        "ms",
        [("avg", "record.queue.time.avg", "avg"), ("max", "record.queue.time.max", "max")],
    ),
    (
        "Throttle time",
        "ms",
        [("avg", "produce.throttle.time.avg", "avg"), ("max", "produce.throttle.time.max", "max")],
    ),
    (
        "Connection creation rate (connect attempts)",
        "/s",
        [("avg", "connection.creation.rate", "avg")],
    ),
)
GAUGE_METRICS: Final = tuple(
    f"org.apache.kafka.{kind}.{suffix}"
    for kind in _KINDS
    for _, _, lines in CHARTS
    for _, suffix, _ in lines
)


@dataclass(slots=True)
class Chart:
    title: str
    unit: str
    series: list[Series]


@dataclass(slots=True)
class ClientReport:
    client_instance_id: str
    client_id: str | None = None
    client_type: str | None = None
    software: str | None = None
    hours: int = 0
    latency_avg_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_max_ms: float | None = None
    queue_avg_ms: float | None = None
    throttle_max_ms: float | None = None
    connection_rate: float | None = None
    connections_created: float | None = None
    charts: list[Chart] = field(default_factory=list)
    means_of: dict[str, int] = field(default_factory=dict)  # hourly rows behind each mean

    @property
    def worst_p99(self) -> float:
        return self.latency_p99_ms if self.latency_p99_ms is not None else -math.inf


def build(health: pa.Table | None, gauges: pa.Table | None) -> list[ClientReport]:
    """One report per client instance found in either table, worst p99 first."""
    clients: dict[str, ClientReport] = {}
    for row in health.to_pylist() if health is not None else []:
        client = _client(clients, row)
        client.client_type = row.get("client_type") or client.client_type
        client.hours += 1
        _fold(client, row)
    points = _gauge_points(gauges, clients)
    for instance_id, client in clients.items():
        client.charts = [
            Chart(
                title,
                unit,
                [
                    Series(label, PALETTE[i], tuple(points.get((instance_id, suffix, column), ())))
                    for i, (label, suffix, column) in enumerate(lines)
                ],
            )
            for title, unit, lines in CHARTS
        ]
        if client.latency_p99_ms is None:
            p99 = [v for _, v in points.get((instance_id, "node.request.latency.avg", "p99"), ())]
            client.latency_p99_ms = max(p99) if p99 else None
    return sorted(clients.values(), key=lambda c: (-c.worst_p99, c.client_id or ""))


def _client(clients: dict[str, ClientReport], row: dict[str, Any]) -> ClientReport:
    instance_id = str(row["client_instance_id"])
    client = clients.get(instance_id)
    if client is None:
        client = clients[instance_id] = ClientReport(instance_id)
    client.client_id = row.get("client_id") or client.client_id
    name, version = row.get("client_software_name"), row.get("client_software_version")
    if name:
        client.software = f"{name} {version or ''}".strip()
    return client


def _fold(client: ClientReport, row: dict[str, Any]) -> None:
    """Add one hourly health row: worst of the worsts, running mean of the means."""
    client.latency_p99_ms = _max(client.latency_p99_ms, row.get("request_latency_p99_ms"))
    client.latency_max_ms = _max(client.latency_max_ms, row.get("request_latency_max_ms"))
    client.throttle_max_ms = _max(client.throttle_max_ms, row.get("throttle_time_max_ms"))
    client.latency_avg_ms = _mean(client, client.latency_avg_ms, row, "request_latency_avg_ms")
    client.queue_avg_ms = _mean(client, client.queue_avg_ms, row, "queue_time_avg_ms")
    client.connection_rate = _mean(client, client.connection_rate, row, "connection_creation_rate")
    created = row.get("connections_created")
    if created is not None:
        client.connections_created = (client.connections_created or 0.0) + float(created)


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
        for _, _, lines in CHARTS:
            for _, wanted, column in lines:
                value = row.get(column)
                if wanted != suffix or value is None:
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
