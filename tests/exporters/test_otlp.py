"""The otlp exporter against a real HTTP server: identity, batching, retries, backpressure."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
from typing import Any

import pytest

from exporters import registry
from exporters.api import BufferingExporter, TransientExportError
from exporters.otlp import OtlpExporter
from exporters.otlp.delivery import retry_after_s
from tests.exporters.otlp_sink import Answer, OtlpSink
from tests.exporters.support import INSTANCE_ID, PRODUCER_PUSH, payload, push

FAST = {"retry_initial_ms": 10, "retry_max_ms": 50, "batch_timeout_ms": 0}


def _exporter(sink: OtlpSink, **options: Any) -> OtlpExporter:
    exporter = registry.create("out", "otlp", {"endpoint": sink.url, **FAST, **options})
    assert isinstance(exporter, OtlpExporter)
    return exporter


async def test_every_push_arrives_with_its_identity_as_resource_attributes() -> None:
    payload = PRODUCER_PUSH.read_bytes()
    with OtlpSink() as sink:
        exporter = _exporter(sink, headers={"Authorization": "Bearer t0ken"})
        assert isinstance(exporter, BufferingExporter)
        await exporter.start()
        await exporter.export([push(payload, offset=3), push(payload, offset=4, client_id="b")])
        await exporter.flush()
        assert exporter.durable_offset() == 5
        await exporter.close()
    assert sink.received[0].headers["Content-Encoding"] == "gzip"
    assert sink.received[0].headers["Authorization"] == "Bearer t0ken"
    resources = sink.resource_attributes()
    assert [r["kafka.client.id"] for r in resources] == ["probe", "b"]
    first = resources[0]
    assert first["kafka.client.instance.id"] == INSTANCE_ID
    assert first["kafka.client.software.name"] == "confluent-kafka-python"
    assert first["kafka.client.software.version"] == "2.16.1-rdkafka-2.16.0"
    assert first["kafka.principal"] == "User:alice"
    assert first["kafka.client.source.address"] == "127.0.0.1"
    assert first["kafka.client.source.port"] == 50000
    assert exporter.stats.delivered_pushes == 2


async def test_pushes_share_requests_up_to_the_byte_limit_and_wait_for_company() -> None:
    payload = PRODUCER_PUSH.read_bytes()
    with OtlpSink() as sink:
        # A limit of about two pushes: six pushes go as three requests.
        exporter = _exporter(sink, batch_max_bytes=int(len(payload) * 2.5), batch_timeout_ms=60_000)
        await exporter.start()
        await exporter.export([push(payload, offset=i) for i in range(6)])
        await exporter.flush()
        await exporter.close()
    assert [len(r.request.resource_metrics) for r in sink.received] == [2, 2, 2]


async def test_retryable_answers_are_retried_after_retry_after_and_commit_waits() -> None:
    with OtlpSink(script=[Answer(503, "0"), Answer(429, "0"), Answer(502), Answer(504)]) as sink:
        exporter = _exporter(sink)
        await exporter.start()
        await exporter.export([push(PRODUCER_PUSH.read_bytes(), offset=9)])
        assert exporter.durable_offset() == 9  # not delivered yet: nothing to commit
        await exporter.flush()
        assert exporter.durable_offset() == 10
        await exporter.close()
    assert sink.attempts == 5
    assert len(sink.received) == 1
    assert exporter.stats.failed_attempts == 4
    assert exporter.failing is None


async def test_other_failures_are_retried_too_rather_than_dropping_the_backlog() -> None:
    with OtlpSink(script=[Answer(401), Answer(500), Answer(404)]) as sink:
        exporter = _exporter(sink)
        await exporter.start()
        await exporter.export([push(PRODUCER_PUSH.read_bytes(), offset=1)])
        await exporter.flush()
        await exporter.close()
    assert len(sink.received) == 1
    assert exporter.stats.dropped_pushes == 0


async def test_bad_data_is_dropped_and_counted_and_too_large_is_split() -> None:
    payload = PRODUCER_PUSH.read_bytes()
    with OtlpSink(script=[Answer(413), Answer(200), Answer(400)]) as sink:
        exporter = _exporter(sink, batch_timeout_ms=60_000)
        await exporter.start()
        await exporter.export([push(payload, offset=1), push(payload, offset=2)])
        await exporter.flush()
        await exporter.close()
    # 413 for both; the halves: the first delivered, the second refused as bad data.
    assert len(sink.received) == 1
    assert len(sink.received[0].request.resource_metrics) == 1
    assert exporter.stats.delivered_pushes == 1
    assert exporter.stats.dropped_pushes == 1
    assert exporter.durable_offset() == 3


async def test_a_400_for_one_bad_push_is_bisected_and_only_that_push_is_dropped() -> None:
    payload = PRODUCER_PUSH.read_bytes()
    with OtlpSink(refuse_client_id="bad") as sink:
        exporter = _exporter(sink, batch_timeout_ms=60_000)
        await exporter.start()
        pushes = [
            push(payload, offset=i, client_id="bad" if i == 5 else f"good-{i}") for i in range(8)
        ]
        await exporter.export(pushes)
        await exporter.flush()
        await exporter.close()
    delivered = sorted(r["kafka.client.id"] for r in sink.resource_attributes())
    assert delivered == sorted(f"good-{i}" for i in range(8) if i != 5)
    assert exporter.stats.delivered_pushes == 7
    assert exporter.stats.dropped_pushes == 1
    assert exporter.durable_offset() == 8  # the bad push is dropped, not retried forever
    # 8 refused; 0-3 delivered, 4-7 refused; 4-5 refused: 4 delivered, 5 dropped; 6-7 delivered.
    assert sink.request_sizes == [8, 4, 4, 2, 1, 1, 2]
    assert exporter.stats.split_requests == 3


async def test_partial_success_is_counted() -> None:
    with OtlpSink(script=[Answer(200, rejected_points=7)]) as sink:
        exporter = _exporter(sink)
        await exporter.start()
        await exporter.export([push(PRODUCER_PUSH.read_bytes(), offset=1)])
        await exporter.flush()
        await exporter.close()
    assert exporter.stats.rejected_data_points == 7


async def test_a_down_backend_fills_the_buffer_then_export_refuses_and_nothing_is_lost() -> None:
    payload = PRODUCER_PUSH.read_bytes()
    with OtlpSink(script=[Answer(503)] * 1000) as sink:
        exporter = _exporter(sink, max_pending_bytes=len(payload) * 3, max_in_flight=1)
        await exporter.start()
        batch = [push(payload, offset=i) for i in range(10)]
        with pytest.raises(TransientExportError, match="failing backend"):
            await asyncio.wait_for(exporter.export(batch), 10)
        assert exporter.durable_offset() == 0
        queued = exporter._exported_end
        assert 0 < queued < 10
        sink.script.clear()  # the backend recovers; the host offers the batch again
        for _ in range(200):
            if exporter.failing is None:
                break
            await asyncio.sleep(0.05)
        await exporter.export(batch)
        await exporter.flush()
        await exporter.close()
    offsets = [r["kafka.client.instance.id"] for r in sink.resource_attributes()]
    assert len(offsets) == 10  # every push exactly once: the re-offered head was not queued twice
    assert exporter.durable_offset() == 10


async def test_close_gives_up_on_a_dead_backend_without_committing() -> None:
    with OtlpSink(script=[Answer(503)] * 10_000) as sink:
        exporter = _exporter(sink, timeout_s=0.5)
        await exporter.start()
        await exporter.export([push(PRODUCER_PUSH.read_bytes(), offset=4)])
        await exporter.close()
        assert exporter.durable_offset() == 4
        assert not sink.received


def test_an_uncompressed_body_is_plain_protobuf() -> None:
    async def run() -> None:
        with OtlpSink() as sink:
            exporter = _exporter(sink, compression="none")
            await exporter.start()
            await exporter.export([push(PRODUCER_PUSH.read_bytes(), offset=1)])
            await exporter.flush()
            await exporter.close()
            assert "Content-Encoding" not in sink.received[0].headers

    asyncio.run(run())


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({}, "endpoint"),
        ({"endpoint": "ftp://x/v1/metrics"}, "endpoint"),
        ({"endpoint": "http://x/v1/metrics", "headers": {"a": 1}}, "headers"),
        ({"endpoint": "http://x/v1/metrics", "headers": {"Content-Type": "x"}}, "headers"),
        ({"endpoint": "http://x/v1/metrics", "compression": "zstd"}, "compression"),
        ({"endpoint": "http://x/v1/metrics", "max_in_flight": 0}, "max_in_flight"),
        ({"endpoint": "http://x/v1/metrics", "colour": "red"}, "colour"),
    ],
)
def test_bad_options_are_refused_naming_the_key(options: dict[str, Any], key: str) -> None:
    with pytest.raises(registry.ExporterConfigError) as refused:
        registry.create("out", "otlp", options)
    assert key in str(refused.value)


def test_retry_after_takes_seconds_or_an_http_date() -> None:
    now = dt.datetime(2026, 11, 25, 12, 0, 0, tzinfo=dt.UTC)
    assert retry_after_s("3", now) == 3.0
    assert retry_after_s("Wed, 25 Nov 2026 12:00:07 GMT", now) == 7.0
    assert retry_after_s("Wed, 25 Nov 2026 11:00:00 GMT", now) == 0.0
    assert retry_after_s("soon", now) is None
    assert retry_after_s(None, now) is None
    assert gzip.decompress(gzip.compress(b"x")) == b"x"


async def test_a_forwarded_push_keeps_the_broker_id_the_forward_route_added() -> None:
    forwarded = payload(resource={"kafka.broker.id": "3", "kafka.client.id": "spoofed"})
    with OtlpSink() as sink:
        exporter = _exporter(sink)
        await exporter.start()
        await exporter.export([push(forwarded, offset=1)])
        await exporter.flush()
        await exporter.close()
    (resource,) = sink.resource_attributes()
    assert resource["kafka.broker.id"] == "3"
    assert resource["kafka.client.id"] == "probe"  # the context wins over the payload
