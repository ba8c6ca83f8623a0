"""Builders for logged pushes and OTLP payloads shared by the exporter tests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, MetricsData

from exporters.api import LoggedPush
from exporters.otlp_rows import COLUMNS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exporters.api import Exporter

DATA = Path("/work/shared/data")
PRODUCER_PUSH = DATA / "librdkafka-2.16-producer-push.otlp.bin"
CONSUMER_PUSH = DATA / "librdkafka-2.16-consumer-push.otlp.bin"

PRODUCERS_INTERVAL_MS = 300
#: ``kip714 serve`` configuration: producers push every 300 ms, a ``jsonl`` landing
#: records what was logged; append the exporter under test.
PRODUCERS_INTO_JSONL = f"""
[subscriptions.all]
metrics = ["org.apache.kafka.producer."]
"interval.ms" = {PRODUCERS_INTERVAL_MS}
[exporters.landing]  # the exporters under test and a JSONL record of what was pushed
enabled = false
[exporters.lines]
type = "jsonl"
[exporters.lines.options]
path = "{{out}}/"
"""

INSTANCE_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
RECEIVED_MS = 1_795_234_860_000
RECEIVED_NS = RECEIVED_MS * 1_000_000
T0 = 1_795_234_858_625_605_000
T1 = 1_795_234_859_705_846_000


def push(payload: bytes, offset: int = 7, **overrides: Any) -> LoggedPush:
    fields: dict[str, Any] = {
        "offset": offset,
        "client_instance_id": INSTANCE_ID,
        "subscription_id": -12345,
        "client_id": "probe",
        "client_software_name": "confluent-kafka-python",
        "client_software_version": "2.16.1-rdkafka-2.16.0",
        "client_source_address": "127.0.0.1",
        "client_source_port": 50000,
        "principal": "User:alice",
        "received_time_ms": RECEIVED_MS,
        "push_interval_ms": 1000,
        "terminating": False,
        "content_type": "OTLP",
        "payload": payload,
    }
    fields.update(overrides)
    return LoggedPush(**fields)


def payload(
    *metrics: Metric,
    resource: dict[str, str] | None = None,
    scope: tuple[str, str] = ("probe#producer-1", "2.16.0"),
) -> bytes:
    data = MetricsData()
    rm = data.resource_metrics.add()
    for key, value in (resource or {}).items():
        rm.resource.attributes.add(key=key, value=AnyValue(string_value=value))
    sm = rm.scope_metrics.add()
    sm.scope.name, sm.scope.version = scope
    sm.metrics.extend(metrics)
    return bytes(data.SerializeToString())


def kv(key: str, **value: Any) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(**value))


def row(**values: Any) -> dict[str, Any]:
    """An expected row: the defaults of ``push()`` and ``payload()``, None elsewhere."""
    expected: dict[str, Any] = dict.fromkeys(COLUMNS)
    expected.update(
        time=T1,
        start_time=T0,
        received_time=RECEIVED_NS,
        client_instance_id=INSTANCE_ID,
        client_id="probe",
        client_software_name="confluent-kafka-python",
        client_software_version="2.16.1-rdkafka-2.16.0",
        client_source_address="127.0.0.1",
        principal="User:alice",
        attributes={},
        resource_attributes={},
        scope_name="probe#producer-1",
        scope_version="2.16.0",
        terminating=False,
        push_offset=7,
    )
    expected.update(values)
    return expected


E = TypeVar("E", bound="Exporter")


async def run_exporter(
    exporter: E,
    batches: Sequence[Sequence[LoggedPush]],
    log_id: str | None = None,
    *,
    flush_each: bool = False,
) -> E:
    """What the host does: bind the log (if it has an id), start, export, flush, close."""
    bind = getattr(exporter, "bind_log", None)
    if log_id is not None and bind is not None:
        bind(log_id)
    await exporter.start()
    try:
        for batch in batches:
            await exporter.export(batch)
            if flush_each:
                await exporter.flush()
        await exporter.flush()
    finally:
        await exporter.close()
    return exporter
