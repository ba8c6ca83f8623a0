"""A real OpenTelemetry SDK app, configured only by ``OTEL_*`` variables, lands in the table.

``kip714 serve`` runs with its default configuration (plus a fast landing
timer); ``otel_sdk_app.py`` runs in its own process so the environment
variables apply exactly as they would for any application, exports
counters, up-down counters, gauges and histograms through the SDK's
OTLP/HTTP protobuf exporter, and notes every data point of every
acknowledged export. Each of those lands exactly once, with the identity
derived from the SDK's resource.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from telemetry.core.client_uuid import Uuid
from tests.exporters.lake_support import read_rows
from tests.telemetry.serve_process import ServeProcess

APP = Path(__file__).with_name("otel_sdk_app.py")
INSTANCE = "7f7b0d4e-1c0a-4e5e-9a53-1d5bb1a7a001"
CONFIG = """
[exporters.landing]
type = "iceberg"
drain_timeout_s = 60  # the last commit at SIGTERM, on a loaded machine
[exporters.landing.options]
path = "{landing}"
max_file_age_s = 0.5
"""
APP_TIMEOUT_S = 60


def run_app(env: dict[str, str], record: Path) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, str(APP), str(record)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=APP_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def point_key(name: str, attributes: dict[str, str], time_us: int) -> tuple[Any, ...]:
    return (name, tuple(sorted(attributes.items())), time_us)


@pytest.mark.parametrize(
    ("endpoint_variable", "compression"),
    [("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "none"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "gzip")],
    ids=["metrics-endpoint", "base-endpoint-gzip"],
)
def test_an_sdk_app_lands_every_exported_point_once(
    tmp_path: Path, endpoint_variable: str, compression: str
) -> None:
    landing, record = tmp_path / "landing", tmp_path / "exported.jsonl"
    server = ServeProcess(tmp_path / "data", CONFIG.format(landing=landing)).start()
    try:
        base = f"http://{server.http[0]}:{server.http[1]}"
        endpoint = base + "/v1/metrics" if endpoint_variable.endswith("METRICS_ENDPOINT") else base
        result = run_app(
            {
                endpoint_variable: endpoint,
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_COMPRESSION": compression,
                "OTEL_SERVICE_NAME": "checkout",
                "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={INSTANCE},deployment=test",
            },
            record,
        )
        assert server.stop() == 0  # SIGTERM: flush and commit the landing
    finally:
        server.kill()
    exported = [json.loads(line) for line in record.read_text().splitlines()]
    rows = read_rows(landing)  # times as integer µs, maps as dicts

    assert result["exports"] >= 2
    assert {p["name"] for p in exported} == {
        "shop.orders",
        "shop.queue.depth",
        "shop.temperature",
        "shop.latency",
    }
    # Every exported point exactly once, and nothing else.
    assert collections.Counter(
        point_key(r["metric_name"], r["attributes"], r["time"]) for r in rows
    ) == collections.Counter(
        point_key(p["name"], p["attributes"], p["time_unix_nano"] // 1000) for p in exported
    )
    by_key = {point_key(r["metric_name"], r["attributes"], r["time"]): r for r in rows}
    for point in exported:
        row = by_key[point_key(point["name"], point["attributes"], point["time_unix_nano"] // 1000)]
        if "value" in point:
            assert row["value"] == point["value"]
        else:
            assert (row["count"], row["sum"]) == (point["count"], point["sum"])
            assert row["bucket_counts"] == point["bucket_counts"]

    kinds = {
        r["metric_name"]: (r["metric_type"], r["temporality"], r["is_monotonic"]) for r in rows
    }
    assert kinds == {
        "shop.orders": ("sum", "cumulative", True),
        "shop.queue.depth": ("sum", "cumulative", False),
        "shop.temperature": ("gauge", "none", None),
        "shop.latency": ("histogram", "cumulative", None),
    }
    final_orders = max(
        (r for r in rows if r["metric_name"] == "shop.orders"), key=lambda r: r["time"]
    )
    assert final_orders["value"] in {12.0, 16.0}  # 4 rounds of 3 (shop a) or 4 (shop b)

    # The identity derived from the SDK's resource (docs/http.md).
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, "urn:kip714:otlp")
    seed = "\x00".join(("service.instance.id", "", "checkout", INSTANCE))
    instance_id = str(Uuid.from_bytes(uuid.uuid5(namespace, seed).bytes))
    identities = {
        (
            r["client_instance_id"],
            r["client_id"],
            r["client_software_name"],
            r["client_software_version"],
            r["client_source_address"],
            r["principal"],
        )
        for r in rows
    }
    [(landed_id, client_id, software, version, address, principal)] = identities
    assert (landed_id, client_id, software) == (instance_id, "checkout", "opentelemetry-python")
    assert version is not None and version[0].isdigit()
    assert (address, principal) == ("127.0.0.1", "User:ANONYMOUS")
    assert all(r["resource_attributes"]["deployment"] == "test" for r in rows)


QUOTA_CONFIG = (
    CONFIG
    + """
[quotas]
window_num = 2
window_size_s = 1
[[quotas.clients]]
client_id = "checkout"
push_byte_rate = 400
"""
)


def test_an_sdk_app_over_its_byte_rate_retries_on_429_and_every_point_lands(
    tmp_path: Path,
) -> None:
    """The SDK's exporter retries 429 after ``Retry-After``, within its 10 s budget.

    An export is about 800 bytes; over 2 windows of 1 s (a rate measured over
    at least 1 s) a quota of 400 B/s throttles each accepted export for
    about 1-2 s, so the next export, 300 ms later, is muted: 429 with a
    ``Retry-After`` of 1-3 s, which the SDK waits (in place of its own
    backoff) before sending again. Nothing is dropped.
    """
    landing, record = tmp_path / "landing", tmp_path / "exported.jsonl"
    server = ServeProcess(tmp_path / "data", QUOTA_CONFIG.format(landing=landing)).start()
    try:
        host, port = server.http
        result = run_app(
            {
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://{host}:{port}/v1/metrics",
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
                "OTEL_SERVICE_NAME": "checkout",
                "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={INSTANCE}",
            },
            record,
        )
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert server.stop() == 0
    finally:
        server.kill()
    exported = [json.loads(line) for line in record.read_text().splitlines()]
    rows = read_rows(landing)

    def sample(name: str) -> float:
        [value] = [
            float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(name)
        ]
        return value

    assert result["failures"] == 0  # every export was acknowledged, after retries
    assert (
        sample('kip714_http_ingest_responses_total{route="/v1/metrics",status="200"}')
        == (result["exports"])
    )
    assert sample('kip714_http_ingest_responses_total{route="/v1/metrics",status="429"}') >= 1
    assert sample('kip714_throttles_total{reason="push_byte_rate"}') >= 1
    assert collections.Counter(
        point_key(r["metric_name"], r["attributes"], r["time"]) for r in rows
    ) == collections.Counter(
        point_key(p["name"], p["attributes"], p["time_unix_nano"] // 1000) for p in exported
    )
