"""What the broker-plugin tests share: kip714's config, the plugin's properties, the landing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.exporters.lake_support import table_rows

if TYPE_CHECKING:
    from pathlib import Path

    from tests.kafka.kafka_dist import KafkaBroker
    from tests.telemetry.serve_process import ServeProcess

TOKEN = "e2e-broker-token"
KIP714_CONFIG = f"""
[forward]
token = "{TOKEN}"
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
max_file_age_s = 1
"""
CLIENT_METRICS = "org.apache.kafka.tools.ClientMetricsCommand"
#: KIP-1217's exporter interface, Kafka 4.2+.
EXPORTER_REPORTER = "io.kip714.broker.Kip714ExporterReporter"
#: The ClientTelemetry interface, Kafka 3.7+.
RECEIVER_REPORTER = "io.kip714.broker.Kip714Reporter"
LANDED_COLUMNS = (
    "push_offset", "received_time", "metric_name", "client_id", "client_instance_id",
    "client_software_name", "client_software_version", "client_source_address", "principal",
    "attributes", "resource_attributes", "terminating",
)  # fmt: skip


def plugin_properties(
    kip714: ServeProcess, reporter: str = EXPORTER_REPORTER, **extra: str
) -> dict[str, str]:
    host, port = kip714.http
    return {
        "metric.reporters": reporter,
        "kip714.url": f"http://{host}:{port}",
        "kip714.token": TOKEN,
        "kip714.linger.ms": "20",
        **{key.replace("_", "."): value for key, value in extra.items()},
    }


def subscribe(broker: KafkaBroker, metrics: str, interval_ms: int) -> None:
    """``kafka-client-metrics.sh --alter``: one subscription for every client of the broker."""
    broker.tool(
        CLIENT_METRICS, "--alter", "--name", "kip714-e2e",
        "--metrics", metrics, "--interval", str(interval_ms),
    )  # fmt: skip


def landed_rows(data_dir: Path) -> list[dict[str, Any]]:
    """Every data point kip714 landed under ``data_dir`` (its lake), one dict each."""
    return table_rows(data_dir, LANDED_COLUMNS)


def assert_forwarded_pushes_landed_once(
    counters: dict[str, int], data_dir: Path
) -> list[dict[str, Any]]:
    """The plugin forwarded everything it received, and each push landed once via broker 1.

    Returns the landed rows for the caller's own checks.
    """
    assert counters["received"] > 0
    assert counters == {
        "received": counters["received"],
        "forwarded": counters["received"],
        "rejected": 0,
        "dropped": 0,
    }
    rows = landed_rows(data_dir)
    pushes = {row["push_offset"] for row in rows}
    assert len(pushes) == counters["forwarded"], "every acknowledged push landed, once"
    keys = [(r["push_offset"], r["metric_name"], tuple(sorted(r["attributes"]))) for r in rows]
    assert len(keys) == len(set(keys)), "no data point landed twice"
    for row in rows:
        assert dict(row["resource_attributes"])["kafka.broker.id"] == "1"
    return rows
