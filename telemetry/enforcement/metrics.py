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
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from telemetry.enforcement import ThrottleReason

if TYPE_CHECKING:
    from collections.abc import Iterable

    from telemetry.enforcement import Enforcement

__all__ = ["quota_families"]

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


def quota_families(enforcement: Enforcement, now_ms: int) -> Iterable[Metric]:
    """The Prometheus families of one server's quotas, measured at ``now_ms``."""
    by_client = {
        key: GaugeMetricFamily(name, documentation, labels=_CLIENT)
        for key, (name, documentation) in _BY_NAME.items()
    }
    throttle_time = GaugeMetricFamily(
        "kip714_quota_throttle_time_ms",
        "Average throttle time given to a quota entity's responses, per quota type.",
        labels=["quota_type", *_CLIENT],
    )
    queue_size = GaugeMetricFamily(
        "kip714_quota_throttled_channels",
        "Responses whose throttle has not yet elapsed, per quota type (Kafka's queue-size).",
        labels=["quota_type"],
    )
    exempt = GaugeMetricFamily(
        "kip714_quota_exempt_request_time_percent",
        "Time of requests exempt from request quotas, in % of one thread.",
    )
    creation_rate = GaugeMetricFamily(
        "kip714_connection_creation_rate",
        "New connections/s, broker-wide, per listener and per address with a quota.",
        labels=["scope", "name"],
    )
    accept_throttle = GaugeMetricFamily(
        "kip714_connection_accept_throttle_time_ms",
        "Average acceptor delay (kind=broker) and per-address throttle (kind=ip), per listener.",
        labels=["kind", "listener"],
    )
    for metric_name, metric in enforcement.metrics.metrics.items():
        value = metric.measurable_value(now_ms)
        if math.isnan(value):
            continue
        tags = metric_name.tag_map
        key = (metric_name.group, metric_name.name)
        client = [tags.get("user", ""), tags.get("client-id", "")]
        if key in by_client:
            by_client[key].add_metric(client, value)
        elif metric_name.name == "throttle-time":
            throttle_time.add_metric([metric_name.group, *client], value)
        elif metric_name.name == "queue-size":
            queue_size.add_metric([metric_name.group], value)
        elif metric_name.name == "exempt-request-time":
            exempt.add_metric([], value)
        elif metric_name.name == "broker-connection-accept-rate":
            creation_rate.add_metric(["broker", ""], value)
        elif metric_name.name == "connection-accept-rate":
            scope = "ip" if "ip" in tags else "listener"
            creation_rate.add_metric([scope, tags.get("ip", tags.get("listener", ""))], value)
        elif metric_name.name.endswith("connection-accept-throttle-time"):
            kind = "ip" if metric_name.name.startswith("ip-") else "broker"
            accept_throttle.add_metric([kind, tags.get("listener", "")], value)
    decoded = _decoded_bytes(enforcement, now_ms, throttle_time, queue_size)
    yield from by_client.values()
    yield decoded
    yield from (throttle_time, queue_size, exempt, creation_rate, accept_throttle)
    yield from _connections_and_memory(enforcement)


def _decoded_bytes(
    enforcement: Enforcement,
    now_ms: int,
    throttle_time: GaugeMetricFamily,
    queue_size: GaugeMetricFamily,
) -> GaugeMetricFamily:
    """``push_decoded_byte_rate``'s sensors (a registry of their own); throttles join the rest."""
    decoded = GaugeMetricFamily(
        "kip714_quota_push_decoded_byte_rate",
        "Decoded (decompressed) push bytes/s of a quota entity (push_decoded_byte_rate).",
        labels=_CLIENT,
    )
    for metric_name, metric in enforcement.clients.decoded_metrics.metrics.items():
        value = metric.measurable_value(now_ms)
        if math.isnan(value):
            continue
        tags = metric_name.tag_map
        client = [tags.get("user", ""), tags.get("client-id", "")]
        if metric_name.name == "byte-rate":
            decoded.add_metric(client, value)
        elif metric_name.name == "throttle-time":
            throttle_time.add_metric(["PushDecoded", *client], value)
        elif metric_name.name == "queue-size":
            queue_size.add_metric(["PushDecoded"], value)
    return decoded


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
