"""The serving process loads no lake library: the landing's workers do, and it still lands.

``kip714 serve`` on its embedded defaults (no configuration file): the
Iceberg catalog, pyarrow, DuckDB and what they pull in (pydantic,
SQLAlchemy) belong to the landing's worker processes, which open the tables
and commit (docs/architecture.md "Processes"). Read from the processes'
``/proc/<pid>/maps``: a Python extension module or a native library is
mapped into every process that imported it, so a library's shared objects
in the server's map mean the server loaded it. pyiceberg's own modules are
pure Python (its native parts load on first use), but every pyiceberg
module that opens a catalog or a table imports pydantic, whose core is
native, and the SQL catalog SQLAlchemy: their absence shows pyiceberg's.
The worker's map, which must show them, shows that the check sees them
where they are.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from telemetry.errors import ErrorCode
from tests.exporters.lake_support import read_table
from tests.telemetry.kafka_wire_client import WireClient, otlp_payload
from tests.telemetry.serve_process import ServeProcess
from tests.telemetry.server.landing_support import POINTS_PER_PUSH, wait_until

#: A mapped path of each library (its extension modules, its bundled native libraries).
LIBRARIES = {
    "pyarrow": re.compile(r"/pyarrow/|/libarrow"),
    "pyiceberg": re.compile(r"/pyiceberg(_core)?/"),
    "duckdb": re.compile(r"duckdb"),
    "pydantic": re.compile(r"/pydantic_core/"),
    "sqlalchemy": re.compile(r"/sqlalchemy/"),
}
#: The embedded default subscription asks for the standard metrics (``org.apache.kafka.``).
NAME = "org.apache.kafka.footprint.r{}.c{}"
CLIENTS = 3


def spawned_children(pid: int) -> list[int]:
    """``pid``'s children started by multiprocessing's spawn (not its resource tracker)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return [c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def loaded(pid: int) -> set[str]:
    """The libraries whose shared objects ``pid`` has mapped."""
    with open(f"/proc/{pid}/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/" in line}
    return {name for name, pattern in LIBRARIES.items() if any(pattern.search(p) for p in paths)}


async def _push_once_each(server: ServeProcess, run: int) -> set[str]:
    """One push from each of ``CLIENTS`` fresh client instances; the names acknowledged."""
    acknowledged: set[str] = set()
    for index in range(CLIENTS):
        client = await WireClient.connect(*server.kafka, client_id=f"footprint-{index}")
        try:
            answer = await client.subscribe()
            name = NAME.format(run, index)
            response = await client.push(
                answer.client_instance_id,
                answer.subscription_id,
                otlp_payload(name, points=POINTS_PER_PUSH),
            )
            if response.error_code == ErrorCode.NONE:
                acknowledged.add(name)
        finally:
            await client.close()
    return acknowledged


def landed(data: Path) -> set[str]:
    table = read_table(data)
    return set(table.column("metric_name").to_pylist()) if table.num_rows else set()


def test_the_serving_process_loads_no_lake_library_and_the_landing_still_lands(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    server = ServeProcess(data).start()  # no configuration: the embedded defaults
    try:
        assert server.process is not None
        pid = server.process.pid
        acknowledged = asyncio.run(_push_once_each(server, 0))
        assert len(acknowledged) == CLIENTS
        # Landed by the workers: committed, readable by any Iceberg reader.
        assert wait_until(lambda: acknowledged <= landed(data), 60)
        assert loaded(pid) == set()
        workers = spawned_children(pid)
        assert workers  # the landing's worker process(es)
        # The worker that committed holds the catalog's libraries too.
        assert any({"pyarrow", "pydantic", "sqlalchemy"} <= loaded(w) for w in workers)
        # Still serving after all that: a fresh client is answered.
        acknowledged |= asyncio.run(_push_once_each(server, 1))
        assert len(acknowledged) == 2 * CLIENTS
        assert server.stop() == 0  # SIGTERM: the last generation is committed
    finally:
        server.kill()
    rows = read_table(data)
    names = rows.column("metric_name").to_pylist()
    assert all(names.count(name) == POINTS_PER_PUSH for name in acknowledged)  # exactly once
