"""Quota sensors on ``/metrics``: Kafka's metric names, in Prometheus's conventions.

Every sensor of the enforcement registry is measured at scrape time (the
quotas library measures against ``now_ms``), so the figures are the very
numbers the throttles are computed from:

* Produce ``byte-rate`` → ``kip714_quota_push_byte_rate{user,client_id}``, and in
  the decoded-bytes registry → ``kip714_quota_push_decoded_byte_rate{user,client_id}``
  (its ``throttle-time`` under ``quota_type="PushDecoded"``)
* Request ``request-time`` → ``kip714_quota_request_time_percent{user,client_id}``,
  ``exempt-request-time`` → ``kip714_quota_exempt_request_time_percent``
* ControllerMutation ``tokens``, ``mutation-rate`` →
  ``kip714_quota_mutation_tokens``, ``kip714_quota_mutation_rate`` ``{user,client_id}``
* ``throttle-time`` of each type → ``kip714_quota_throttle_time_ms{quota_type,user,client_id}``
* ``queue-size`` → ``kip714_quota_throttled_channels{quota_type}``
* socket-server-metrics ``connection-accept-rate`` →
  ``kip714_connection_creation_rate{scope,name}`` (scope broker, listener or ip)
* ``connection-accept-throttle-time`` →
  ``kip714_connection_accept_throttle_time_ms{kind,listener}``

plus connection counts, the request memory pool, and
``kip714_throttles_total{reason}`` (every throttle, refusal and limit close,
by the configured key that caused it), and ``kip714_requests_refused_total{door,reason}``
(every request a bound refused).

At most ``[limits] max_entity_series`` quota entities get series of their
own per family; the rest are summed into one ``user="<other>",
client_id="<other>"`` series and counted (``kip714_quota_entities_folded``).
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from telemetry.enforcement import ThrottleReason

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from quotas import MetricName
    from telemetry.enforcement import Enforcement

__all__ = ["OTHER", "gather_quota_families", "quota_families"]

_CLIENT = ["user", "client_id"]
_BY_NAME = {
    ("Produce", "byte-rate"): (
        "kip714_quota_push_byte_rate",
        "PushTelemetry payload bytes/s of a quota entity, as the push_byte_rate quota measures it.",
    ),
    ("Request", "request-time"): (
        "kip714_quota_request_time_percent",
        "Request handling time of a quota entity, in % of one thread (request_percentage).",
    ),
    ("ControllerMutation", "tokens"): (
        "kip714_quota_mutation_tokens",
        "Tokens left in an entity's controller_mutation_rate bucket (negative: in deficit).",
    ),
    ("ControllerMutation", "mutation-rate"): (
        "kip714_quota_mutation_rate",
        "Client instance creations/s of a quota entity.",
    ),
}


#: Label values of the series that sums the entities past ``[limits] max_entity_series``.
OTHER: Final = "<other>"
#: Sensors measured per slice when gathering on the event loop (one slice is ~ a millisecond).
_SLICE: Final = 1000
#: The quota type under which ``push_decoded_byte_rate``'s throttles are shown.
_DECODED: Final = "PushDecoded"


class _QuotaFamilies:
    """The quota families of one scrape, filled a metric at a time.

    At most ``max_entity_series`` quota entities (``user``, ``client_id``)
    get series of their own, the first met; the sensors of the others are
    summed into one series labelled :data:`OTHER` per family, and counted, so
    a flood of entities cannot make a scrape (or its rendering) unbounded.
    """

    def __init__(self, max_entity_series: int | None) -> None:
        self.max_entity_series = max_entity_series
        self.entities: set[tuple[str, str]] = set()
        self.folded_series = 0
        self.folded_entities = 0
        self._folded_seen: set[tuple[str, str]] = set()
        self.by_client = {
            key: GaugeMetricFamily(name, documentation, labels=_CLIENT)
            for key, (name, documentation) in _BY_NAME.items()
        }
        self.decoded = GaugeMetricFamily(
            "kip714_quota_push_decoded_byte_rate",
            "Decoded (decompressed) push bytes/s of a quota entity (push_decoded_byte_rate).",
            labels=_CLIENT,
        )
        self.other: dict[tuple[str, str], float] = {}
        self.throttle_time = GaugeMetricFamily(
            "kip714_quota_throttle_time_ms",
            "Average throttle time given to a quota entity's responses, per quota type.",
            labels=["quota_type", *_CLIENT],
        )
        self.queue_size = GaugeMetricFamily(
            "kip714_quota_throttled_channels",
            "Responses whose throttle has not yet elapsed, per quota type (Kafka's queue-size).",
            labels=["quota_type"],
        )
        self.exempt = GaugeMetricFamily(
            "kip714_quota_exempt_request_time_percent",
            "Time of requests exempt from request quotas, in % of one thread.",
        )
        self.creation_rate = GaugeMetricFamily(
            "kip714_connection_creation_rate",
            "New connections/s, broker-wide, per listener and per address with a quota.",
            labels=["scope", "name"],
        )
        self.accept_throttle = GaugeMetricFamily(
            "kip714_connection_accept_throttle_time_ms",
            "Average acceptor delay (kind=broker) and per-address throttle (kind=ip), "
            "per listener.",
            labels=["kind", "listener"],
        )

    def _own_series(self, client: tuple[str, str]) -> bool:
        """Whether ``client`` gets series of its own (else its sensors go to :data:`OTHER`)."""
        entities = self.entities
        if client in entities:
            return True
        if self.max_entity_series is None or len(entities) < self.max_entity_series:
            entities.add(client)
            return True
        self.folded_series += 1
        if client not in self._folded_seen:
            self._folded_seen.add(client)
            self.folded_entities += 1
        return False

    def add(self, metric_name: MetricName, value: float) -> None:
        if math.isnan(value):
            return
        tags = metric_name.tag_map
        key = (metric_name.group, metric_name.name)
        name = metric_name.name
        if key in self.by_client or name == "throttle-time":
            client = (tags.get("user", ""), tags.get("client-id", ""))
            if not self._own_series(client):
                fold = (metric_name.group, name)
                self.other[fold] = self.other.get(fold, 0.0) + value
            elif key in self.by_client:
                self.by_client[key].add_metric(list(client), value)
            else:
                self.throttle_time.add_metric([metric_name.group, *client], value)
        elif name == "queue-size":
            self.queue_size.add_metric([metric_name.group], value)
        elif name == "exempt-request-time":
            self.exempt.add_metric([], value)
        elif name == "broker-connection-accept-rate":
            self.creation_rate.add_metric(["broker", ""], value)
        elif name == "connection-accept-rate":
            scope = "ip" if "ip" in tags else "listener"
            self.creation_rate.add_metric([scope, tags.get("ip", tags.get("listener", ""))], value)
        elif name.endswith("connection-accept-throttle-time"):
            kind = "ip" if name.startswith("ip-") else "broker"
            self.accept_throttle.add_metric([kind, tags.get("listener", "")], value)

    def add_decoded(self, metric_name: MetricName, value: float) -> None:
        """A sensor of the decoded-bytes registry: its own family, throttles as ``PushDecoded``."""
        if math.isnan(value):
            return
        name = metric_name.name
        if name == "queue-size":
            self.queue_size.add_metric([_DECODED], value)
            return
        if name not in ("byte-rate", "throttle-time"):
            return
        tags = metric_name.tag_map
        client = (tags.get("user", ""), tags.get("client-id", ""))
        if not self._own_series(client):
            fold = (_DECODED, name)
            self.other[fold] = self.other.get(fold, 0.0) + value
        elif name == "byte-rate":
            self.decoded.add_metric(list(client), value)
        else:
            self.throttle_time.add_metric([_DECODED, *client], value)

    def families(self) -> list[Metric]:
        for (group, name), value in self.other.items():
            if (group, name) in self.by_client:
                self.by_client[(group, name)].add_metric([OTHER, OTHER], value)
            elif (group, name) == (_DECODED, "byte-rate"):
                self.decoded.add_metric([OTHER, OTHER], value)
            else:
                self.throttle_time.add_metric([group, OTHER, OTHER], value)
        folded = GaugeMetricFamily(
            "kip714_quota_entities_folded",
            "Quota entities past [limits] max_entity_series at this scrape, whose sensors are "
            'summed into the user="<other>" series (kind=entities), and their series '
            "(kind=series).",
            labels=["kind"],
        )
        folded.add_metric(["entities"], self.folded_entities)
        folded.add_metric(["series"], self.folded_series)
        return [
            *self.by_client.values(),
            self.decoded,
            self.throttle_time,
            self.queue_size,
            self.exempt,
            self.creation_rate,
            self.accept_throttle,
            folded,
        ]


def quota_families(
    enforcement: Enforcement, now_ms: int, max_entity_series: int | None = None
) -> Iterable[Metric]:
    """The Prometheus families of one server's quotas, measured at ``now_ms`` in one go."""
    families = _QuotaFamilies(max_entity_series)
    for metric_name, metric in list(enforcement.metrics.metrics.items()):
        families.add(metric_name, metric.measurable_value(now_ms))
    for metric_name, metric in list(enforcement.clients.decoded_metrics.metrics.items()):
        families.add_decoded(metric_name, metric.measurable_value(now_ms))
    yield from families.families()
    yield from _connections_and_memory(enforcement)


async def gather_quota_families(
    enforcement: Enforcement, clock: Callable[[], int], max_entity_series: int | None
) -> list[Metric]:
    """:func:`quota_families`, measured on the event loop a slice of sensors at a time.

    Measuring a sensor purges its old samples, so it must happen on the loop
    that records into it (no lock guards the quota hot path); between slices
    the loop serves everything else, so a scrape of many entities holds it
    for a slice at a time, never for the whole scrape.
    """
    families = _QuotaFamilies(max_entity_series)
    metrics = [
        *((name, metric, False) for name, metric in enforcement.metrics.metrics.items()),
        *(
            (name, metric, True)
            for name, metric in enforcement.clients.decoded_metrics.metrics.items()
        ),
    ]
    for start in range(0, len(metrics), _SLICE):
        now_ms = clock()
        for metric_name, metric, decoded in metrics[start : start + _SLICE]:
            if decoded:
                families.add_decoded(metric_name, metric.measurable_value(now_ms))
            else:
                families.add(metric_name, metric.measurable_value(now_ms))
        await asyncio.sleep(0)
    return [*families.families(), *_connections_and_memory(enforcement)]


def _connections_and_memory(enforcement: Enforcement) -> Iterable[Metric]:
    connection_quotas = enforcement.connections.quotas
    yield GaugeMetricFamily(
        "kip714_connections_counted",
        "Connections counted against max_connections (refused per-IP ones until closed).",
        value=connection_quotas.total_count,
    )
    throttles = CounterMetricFamily(
        "kip714_throttles",
        "Throttles, refusals and limit closes, by the configured key that caused them.",
        labels=["reason"],
    )
    counts = enforcement.tracker.counts
    for reason in ThrottleReason:
        throttles.add_metric([reason.value], counts[reason])
    yield throttles
    refused = CounterMetricFamily(
        "kip714_requests_refused",
        "Requests refused by a bound (design invariant 10), by door and by the bound's key.",
        labels=["door", "reason"],
    )
    for (door, bound), count in sorted(enforcement.refusals.counts.items()):
        refused.add_metric([door, bound], count)
    yield refused
    yield GaugeMetricFamily(
        "kip714_throttled_entities",
        "Client entities and addresses currently throttled.",
        value=enforcement.tracker.throttled_entities,
    )
    pool = enforcement.request_memory
    memory = GaugeMetricFamily(
        "kip714_request_memory_bytes",
        "Request bytes read but not yet handled (started frames as received), and the bound; "
        "unauthenticated: what connections not yet authenticated hold, and their share's bound.",
        labels=["kind"],
    )
    memory.add_metric(["held"], pool.held)
    memory.add_metric(["peak"], pool.peak)
    memory.add_metric(["bound"], pool.bound)
    memory.add_metric(["unauthenticated"], pool.unauthenticated_held)
    memory.add_metric(["unauthenticated_peak"], pool.unauthenticated_peak)
    memory.add_metric(["unauthenticated_bound"], pool.unauthenticated_bound)
    yield memory
    yield GaugeMetricFamily(
        "kip714_request_memory_waiting_connections",
        "Connections paused until the request memory pool has room.",
        value=pool.waiting,
    )
