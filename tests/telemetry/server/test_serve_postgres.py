"""A PostgreSQL catalog several machines share: two nodes land into one table through it,
and ``kip714 rollup --config`` and ``kip714 report --config`` read it (Spark through its
JDBC catalog with the PostgreSQL driver)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.sql import SqlCatalog

from tests.postgres.server import postgres
from tests.telemetry.serve_process import ServeProcess, run_clients
from tests.telemetry.server.test_serve_iceberg import kill_rounds_then_check

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 100
[server]
node_id = "{node}"
[lake]
catalog = {{ type = "sql", uri = "{uri}" }}
warehouse = "{warehouse}"
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
max_file_age_s = 0.3
workers = 1
"""
NODES = ("node-a", "node-b")
COLUMNS = ("push_offset", "metric_name", "ingest_node", "client_id", "terminating")


@contextlib.contextmanager
def opened(uri: str) -> Iterator[SqlCatalog]:
    """The catalog, its connections closed afterwards (each load opens a pool)."""
    catalog = load_catalog("kip714", type="sql", uri=uri)
    assert isinstance(catalog, SqlCatalog)
    try:
        yield catalog
    finally:
        catalog.engine.dispose()


def table_rows(uri: str) -> list[dict[str, Any]]:
    """Every committed row of the shared table, read through the PostgreSQL catalog."""
    with opened(uri) as catalog:
        if not catalog.table_exists(("kip714", "metrics")):
            return []
        table = catalog.load_table(("kip714", "metrics"))
        rows: list[dict[str, Any]] = table.scan(selected_fields=COLUMNS).to_arrow().to_pylist()
        return rows


def kip714(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "telemetry", *argv],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.timeout(1200)  # the first rollup fetches the jars; Spark starts on a loaded machine
def test_two_nodes_share_a_postgresql_catalog_and_rollup_and_report_read_it(
    tmp_path: Path,
) -> None:
    warehouse = (tmp_path / "warehouse").as_uri()
    with postgres() as server:
        # A password in the URL: the rollups pass it on as jdbc.password (trust ignores it).
        uri = server.url(password="kip-secret")
        configs = {n: CONFIG.format(node=n, uri=uri, warehouse=warehouse) for n in NODES}
        # Each node killed (SIGKILL) once under load, restarted: every push once.
        kill_rounds_then_check(tmp_path, configs, lambda: table_rows(uri), rounds=1)
        with opened(uri) as catalog:
            snapshots = catalog.load_table(("kip714", "metrics")).snapshots()
        writers = {
            s.summary.additional_properties.get("kip714.node-id") for s in snapshots if s.summary
        }
        assert writers == set(NODES)

        # Real librdkafka clients on one node: metrics the rollups and the report know.
        node = ServeProcess(tmp_path / NODES[0], configs[NODES[0]]).start()
        try:
            run_clients(node.bootstrap, 2.5, "pg", admin=False)
            assert node.stop() == 0
        finally:
            node.kill()
        config = tmp_path / "kip714.toml"
        config.write_text(configs[NODES[0]])

        rollup = kip714("rollup", "--config", str(config), "--windows", "1h")
        assert rollup.returncode == 0, rollup.stderr[-2000:]
        with opened(uri) as catalog:
            tables = {name for _, name in catalog.list_tables("kip714")}
        assert {"metrics", "gauges_1h", "client_health_1h"} <= tables

        out = tmp_path / "report.html"
        report = kip714("report", "--config", str(config), "--out", str(out))
        assert report.returncode == 0, report.stderr[-2000:]
        match = re.search(r"kip714 report: (\d+) client instance", report.stdout)
        assert match is not None, report.stdout
        assert int(match.group(1)) >= 1
        assert "client_health_1h" in out.read_text()
