"""An application instrumented with the OpenTelemetry Python SDK, run as a subprocess by tests.

It exports through the SDK's own OTLP/HTTP protobuf exporter, configured
only by the standard ``OTEL_*`` environment variables, every 300 ms while it
records known values, and once more at shutdown. Every data point of every
export the server acknowledged is written as a JSON line to the file named
by the first argument, so the test can hold the landing to exactly those.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    MetricExportResult,
    NumberDataPoint,
    PeriodicExportingMetricReader,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricsData

EXPORT_INTERVAL_MS = 300
RECORD_ROUNDS = 4


class RecordingExporter(OTLPMetricExporter):
    """The SDK's exporter, noting each data point of each acknowledged export, and failures."""

    def __init__(self, record_path: Path) -> None:
        super().__init__()
        self.record_path = record_path
        self.exports = 0
        self.failures = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float | None = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        result = super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        if result is MetricExportResult.SUCCESS:
            self.exports += 1
            with self.record_path.open("a") as out:
                for line in _points(metrics_data):
                    out.write(json.dumps(line) + "\n")
        else:
            self.failures += 1  # the SDK gave up on it (retries included): dropped
        return result


def _points(metrics_data: MetricsData) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    for resource in metrics_data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    line: dict[str, Any] = {
                        "name": metric.name,
                        "attributes": {k: str(v) for k, v in (point.attributes or {}).items()},
                        "time_unix_nano": point.time_unix_nano,
                    }
                    if isinstance(point, NumberDataPoint):
                        line["value"] = float(point.value)
                    elif isinstance(point, HistogramDataPoint):
                        line.update(count=point.count, sum=float(point.sum))
                        line["bucket_counts"] = list(point.bucket_counts)
                    points.append(line)
    return points


def main(record_path: Path) -> int:
    exporter = RecordingExporter(record_path)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=EXPORT_INTERVAL_MS)
    provider = MeterProvider(metric_readers=[reader])  # the resource comes from OTEL_* variables
    meter = provider.get_meter("kip714.sdk.test", "1.0")
    orders = meter.create_counter("shop.orders")
    queue = meter.create_up_down_counter("shop.queue.depth")
    temperature = meter.create_gauge("shop.temperature", unit="Cel")
    latency = meter.create_histogram("shop.latency", unit="ms")
    for round_ in range(RECORD_ROUNDS):
        orders.add(3, {"shop": "a"})
        orders.add(4, {"shop": "b"})
        queue.add(5)
        queue.add(-2)
        temperature.set(20.0 + round_, {"room": "cold"})
        for value in (1, 5, 50):
            latency.record(value)
        time.sleep(EXPORT_INTERVAL_MS / 1000)
    provider.shutdown()  # a final collection and export
    print(json.dumps({"exports": exporter.exports, "failures": exporter.failures}))
    return 0 if exporter.exports >= 2 else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
