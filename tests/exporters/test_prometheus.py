"""The prometheus exporter: names, kinds, labels, expiry and the series cap, scraped over HTTP."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import aiohttp
import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    AGGREGATION_TEMPORALITY_DELTA,
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    Sum,
)
from prometheus_client.parser import text_string_to_metric_families

from exporters import registry
from exporters.prometheus import PrometheusExporter, metric_name
from exporters.prometheus.series import SeriesLimits, SeriesStore
from tests.exporters.support import PRODUCER_PUSH, kv, payload, push

T = 1_795_234_859_705_846_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _gauge(name: str, value: float, **attributes: str) -> Metric:
    point = NumberDataPoint(time_unix_nano=T, as_double=value)
    point.attributes.extend(kv(k, string_value=v) for k, v in attributes.items())
    return Metric(name=name, gauge=Gauge(data_points=[point]))


def _sum(
    name: str, value: int, temporality: AggregationTemporality.ValueType, monotonic: bool = True
) -> Metric:
    point = NumberDataPoint(time_unix_nano=T, as_int=value)
    return Metric(
        name=name,
        sum=Sum(data_points=[point], aggregation_temporality=temporality, is_monotonic=monotonic),
    )


def _histogram(
    name: str, counts: list[int], temporality: AggregationTemporality.ValueType
) -> Metric:
    point = HistogramDataPoint(
        time_unix_nano=T,
        count=sum(counts),
        sum=1.5 * sum(counts),
        bucket_counts=counts,
        explicit_bounds=[1.0, 2.0],
    )
    return Metric(
        name=name,
        unit="ms",
        histogram=Histogram(data_points=[point], aggregation_temporality=temporality),
    )


async def _started(**options: Any) -> PrometheusExporter:
    exporter = registry.create("prom", "prometheus", {"listen": "127.0.0.1:0", **options})
    assert isinstance(exporter, PrometheusExporter)
    await exporter.start()
    return exporter


async def _scrape_text(exporter: PrometheusExporter) -> str:
    assert exporter.address is not None
    host, port = exporter.address
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{host}:{port}/metrics") as answer,
    ):
        assert answer.headers["Content-Type"].startswith("text/plain")
        return await answer.text()


async def _scrape(
    exporter: PrometheusExporter,
) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """The client families (the server's own ``kip714_client_*`` ones left out)."""
    text = await _scrape_text(exporter)
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
        if not family.name.startswith("kip714_client_")
    }


@pytest.mark.parametrize(
    ("name", "unit", "kind", "expected"),
    [
        ("org.apache.kafka.producer.request.latency.avg", "", "gauge", None),
        ("http.server.duration", "ms", "histogram", "http_server_duration_milliseconds"),
        ("system.memory.usage", "By", "gauge", "system_memory_usage_bytes"),
        ("cpu.utilization", "1", "gauge", "cpu_utilization_ratio"),
        ("requests", "1", "counter", "requests"),
        ("requests.total", "{request}", "counter", "requests"),
        ("throughput", "By/s", "gauge", "throughput_bytes_per_second"),
        ("io.bytes_bytes", "By", "gauge", "io_bytes_bytes"),
        ("2xx..count", "", "gauge", "_2xx_count"),
    ],
)
def test_names_follow_the_opentelemetry_translation(
    name: str, unit: str, kind: Any, expected: str | None
) -> None:
    assert metric_name(name, unit, kind) == (expected or name.replace(".", "_"))


async def test_gauges_counters_and_histograms_with_identity_labels() -> None:
    exporter = await _started()
    try:
        delta, cumulative = AGGREGATION_TEMPORALITY_DELTA, AGGREGATION_TEMPORALITY_CUMULATIVE
        first = payload(
            _gauge("org.apache.kafka.producer.node.request.latency.avg", 0.5, **{"node.id": "1"}),
            _sum("org.apache.kafka.producer.connection.creation.total", 2, delta),
            _sum("queued", 7, cumulative, monotonic=False),
            _histogram("rtt", [1, 2, 3], delta),
            resource={"kafka.broker.id": "3"},
        )
        second = payload(
            _sum("org.apache.kafka.producer.connection.creation.total", 3, delta),
            _histogram("rtt", [1, 0, 0], delta),
            resource={"kafka.broker.id": "3"},
        )
        now = _now_ms()
        await exporter.export([push(first, 1, received_time_ms=now)])
        await exporter.export([push(second, 2, received_time_ms=now)])
        families = await _scrape(exporter)
    finally:
        await exporter.close()
    ((_, labels, value),) = families["org_apache_kafka_producer_node_request_latency_avg"]
    assert value == 0.5
    assert labels == {
        "client_id": "probe",
        "client_instance_id": "AAAAAAAAAAAAAAAAAAAAAQ",
        "client_software_name": "confluent-kafka-python",
        "client_software_version": "2.16.1-rdkafka-2.16.0",
        "principal": "User:alice",
        "node_id": "1",
        "broker_id": "3",
    }
    counter = families["org_apache_kafka_producer_connection_creation"]
    assert [(n, v) for n, _, v in counter] == [
        ("org_apache_kafka_producer_connection_creation_total", 5.0)  # delta 2 + 3
    ]
    assert [v for _, _, v in families["queued"]] == [7.0]
    rtt = {(n, s.get("le")): v for n, s, v in families["rtt_milliseconds"]}
    assert rtt[("rtt_milliseconds_bucket", "1.0")] == 2
    assert rtt[("rtt_milliseconds_bucket", "2.0")] == 4
    assert rtt[("rtt_milliseconds_bucket", "+Inf")] == 7
    assert rtt[("rtt_milliseconds_count", None)] == 7
    assert rtt[("rtt_milliseconds_sum", None)] == 1.5 * 7


async def test_a_terminating_push_or_silence_removes_an_instances_series() -> None:
    exporter = await _started()
    try:
        now = _now_ms()
        data = PRODUCER_PUSH.read_bytes()
        await exporter.export(
            [
                push(data, 1, client_instance_id="A" * 22, received_time_ms=now),
                push(data, 2, client_instance_id="B" * 22, received_time_ms=now - 61_000),
                # 3 x 30 s interval: still alive after 61 s of silence.
                push(
                    data,
                    3,
                    client_instance_id="C" * 22,
                    received_time_ms=now - 61_000,
                    push_interval_ms=30_000,
                ),
            ]
        )
        name = "org_apache_kafka_producer_connection_creation_rate"
        alive = {labels["client_instance_id"] for _, labels, _ in (await _scrape(exporter))[name]}
        assert alive == {"A" * 22, "C" * 22}
        await exporter.export([push(data, 4, client_instance_id="A" * 22, terminating=True)])
        alive = {labels["client_instance_id"] for _, labels, _ in (await _scrape(exporter))[name]}
        assert alive == {"C" * 22}
        assert exporter.stats.expired_instances == 1
        assert exporter.stats.terminated_instances == 1
    finally:
        await exporter.close()


async def test_series_beyond_max_series_are_dropped_and_counted() -> None:
    exporter = await _started(max_series=5)  # the instance's last-push and interval take 2
    try:
        gauges = [_gauge(f"g{i}", float(i)) for i in range(5)]
        await exporter.export([push(payload(*gauges), 1, received_time_ms=_now_ms())])
        assert sorted(await _scrape(exporter)) == ["g0", "g1", "g2"]
        assert exporter.stats.dropped_points == 2
        assert exporter.stats.series == 5
    finally:
        await exporter.close()


async def test_huge_attribute_values_keep_series_bytes_and_the_scrape_under_max_bytes() -> None:
    max_bytes = 256 * 1024
    exporter = await _started(max_bytes=max_bytes)
    huge = "v" * (256 * 1024)
    try:
        now = _now_ms()
        await exporter.export([push(payload(_gauge("legit", 1.0)), 1, received_time_ms=now)])
        for batch in range(10):
            # Ten points of two 256 KiB attributes each, distinct from their first bytes.
            gauges = [
                _gauge("attack", 1.0, a=f"{batch}-{i}-{huge}", b=f"{batch}-{i}-{huge}")
                for i in range(10)
            ]
            instance = f"{batch:022d}"
            await exporter.export(
                [
                    push(
                        payload(*gauges),
                        2 + batch,
                        client_instance_id=instance,
                        received_time_ms=now,
                    )
                ]
            )
        text = await _scrape_text(exporter)
        stats = exporter.stats
    finally:
        await exporter.close()
    # Unbounded, these 100 series held 50 MiB of label values and the scrape returned as much.
    assert stats.series_bytes <= max_bytes
    assert len(text.encode()) <= max_bytes
    assert stats.truncated_label_values == 200
    assert stats.dropped_points_max_bytes > 0
    assert 0 < stats.series < 101
    families = {family.name: family.samples for family in text_string_to_metric_families(text)}
    assert [s.value for s in families["legit"]] == [
        1.0
    ]  # the client that came first keeps its series
    for sample in families["attack"]:
        assert len(sample.labels["a"].encode()) == 1024
        assert sample.labels["a"].startswith(sample.labels["b"][:4])


async def test_labels_beyond_max_labels_per_series_are_dropped_by_name_order() -> None:
    exporter = await _started(max_labels_per_series=10)
    attributes = {f"k{i:03d}": str(i) for i in range(100)}
    try:
        now = _now_ms()
        forward = _gauge("wide", 1.0, **attributes)
        backward = _gauge("wide", 2.0, **dict(reversed(attributes.items())))
        await exporter.export([push(payload(forward), 1, received_time_ms=now)])
        await exporter.export([push(payload(backward), 2, received_time_ms=now)])
        families = await _scrape(exporter)
        stats = exporter.stats
    finally:
        await exporter.close()
    # Whatever the attributes' order, the same labels are kept: one series, updated.
    [(_, labels, value)] = families["wide"]
    assert value == 2.0
    assert len(labels) == 10
    assert sorted(set(labels) - {"client_id", "client_instance_id", "client_software_name",
                                 "client_software_version", "principal"}) == [
        "k000", "k001", "k002", "k003", "k004"
    ]  # fmt: skip
    assert stats.dropped_labels == 2 * 95
    assert stats.series == 1 + 2  # and the instance's last-push and interval series


def _promtool(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", "check", "metrics"],
        input=text, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


async def test_families_whose_names_would_clash_are_dropped_and_counted() -> None:
    exporter = await _started()
    delta = AGGREGATION_TEMPORALITY_DELTA
    try:
        now = _now_ms()
        first = payload(_gauge("req_total", 1.0), _gauge("rtt_milliseconds_count", 3.0))
        # Another client: a counter "req" renders as req_total, a histogram "rtt" (ms) as
        # rtt_milliseconds_count: with the gauges above, two TYPE lines for one name each.
        second = payload(_sum("req", 5, delta), _histogram("rtt", [1, 2, 3], delta))
        await exporter.export(
            [
                push(first, 1, client_instance_id="A" * 22, received_time_ms=now),
                push(second, 2, client_instance_id="B" * 22, received_time_ms=now),
            ]
        )
        text = await _scrape_text(exporter)
        conflicts = exporter.stats.type_conflicts
        # Once the first client is gone, its names are free for the other kind.
        await exporter.export([push(first, 3, client_instance_id="A" * 22, terminating=True)])
        await exporter.export([push(second, 4, client_instance_id="B" * 22, received_time_ms=now)])
        after = await _scrape_text(exporter)
    finally:
        await exporter.close()
    checked = _promtool(text)
    assert "error while linting" not in checked.stdout + checked.stderr, checked
    assert conflicts == 2
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["req_total"].type == "gauge"
    assert [s.value for s in families["req_total"].samples] == [1.0]
    assert families["rtt_milliseconds_count"].type == "gauge"
    assert "rtt_milliseconds" not in families and "req" not in families
    assert (
        text.count("# TYPE ") == 2 + 2
    )  # and kip714_client_last_push_timestamp_seconds, _interval
    checked = _promtool(after)
    assert "error while linting" not in checked.stdout + checked.stderr, checked
    families = {f.name: f for f in text_string_to_metric_families(after)}
    assert (families["req"].type, families["rtt_milliseconds"].type) == ("counter", "histogram")


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"listen": "nowhere"}, "listen"),
        ({"max_series": 0}, "max_series"),
        ({"max_label_value_bytes": 0}, "max_label_value_bytes"),
        ({"max_labels_per_series": 5}, "max_labels_per_series"),
        ({"max_bytes": "1GiB"}, "max_bytes"),
        ({"x": 1}, "x"),
    ],
)
def test_bad_options_are_refused_naming_the_key(options: dict[str, Any], key: str) -> None:
    with pytest.raises(registry.ExporterConfigError) as refused:
        registry.create("prom", "prometheus", options)
    assert key in str(refused.value)


def _presence(store: SeriesStore) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        family.name: [(series.labels, series.value) for series in family.series.values()]
        for family in store.snapshot()
    }


def test_an_instances_last_push_outlives_its_metrics_until_ten_intervals() -> None:
    store = SeriesStore(SeriesLimits())
    start = 1_800_000_000_000
    interval = 20_000  # its metrics expire at max(60 s, 3 × 20 s), its last push at 10 × 20 s
    store.apply(
        [push(payload(_gauge("g", 1.0)), 1, received_time_ms=start, push_interval_ms=interval)]
    )
    families = _presence(store)
    [(labels, last)] = families["kip714_client_last_push_timestamp_seconds"]
    assert last == start / 1000
    assert labels == {
        "client_id": "probe",
        "client_instance_id": push(b"").client_instance_id,
        "client_software_name": "confluent-kafka-python",
        "client_software_version": "2.16.1-rdkafka-2.16.0",
        "principal": "User:alice",
    }
    assert families["kip714_client_push_interval_seconds"] == [(labels, 20.0)]
    store.expire(start + 60_000)
    assert sorted(_presence(store)) == [
        "kip714_client_last_push_timestamp_seconds", "kip714_client_push_interval_seconds"
    ]  # fmt: skip
    assert store.stats.series == 2
    store.expire(start + 200_000)
    assert _presence(store) == {}
    assert (store.stats.series, store.stats.expired_instances) == (0, 1)


def test_a_terminating_push_removes_the_last_push_at_once() -> None:
    store = SeriesStore(SeriesLimits())
    now = _now_ms()
    store.apply([push(payload(_gauge("g", 1.0)), 1, received_time_ms=now)])
    store.apply([push(payload(_gauge("g", 2.0)), 2, received_time_ms=now, terminating=True)])
    assert _presence(store) == {}
    assert store.stats.series == 0


def test_client_metrics_cannot_take_the_servers_kip714_names() -> None:
    store = SeriesStore(SeriesLimits())
    forged = _gauge("kip714.client.last.push.timestamp.seconds", 1.0)
    store.apply([push(payload(forged, _gauge("g", 1.0)), 1, received_time_ms=_now_ms())])
    families = _presence(store)
    [(_, last)] = families["kip714_client_last_push_timestamp_seconds"]
    assert last != 1.0
    assert "kip714_client_last_push_timestamp_seconds_seconds" not in families
    assert "kip714_client_last_push_timestamp" not in families
    assert store.stats.reserved_name_points == 1
