"""Admin changes on a real ``kip714 serve`` survive a restart and a kill -9."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.telemetry.admin.admin_support import admin_client, subscription
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path

CONFIG = '[subscriptions.base]\nmetrics = ["org.apache.kafka.producer."]\n"interval.ms" = 60000\n'


def admin_of(server: ServeProcess) -> Any:
    return admin_client(*server.kafka)


def dynamic_keys(server: ServeProcess, name: str) -> dict[str, str]:
    admin = admin_of(server)
    try:
        described = admin.describe_configs([subscription(name)])
    finally:
        admin.close()
    return {key: entry["value"] for key, entry in described["client_metrics"][name].items()}


def alter(server: ServeProcess, name: str, configs: dict[str, str]) -> Any:
    admin = admin_of(server)
    try:
        return admin.alter_configs([subscription(name, configs)], incremental=True)
    finally:
        admin.close()


def test_changes_survive_a_restart_and_a_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServeProcess(data, CONFIG).start()
    try:
        first = alter(server, "base", {"interval.ms": "1000"})
        assert server.stop() == 0
        server = ServeProcess(data, CONFIG).start()
        after_restart = dynamic_keys(server, "base")
        second = alter(server, "fresh", {"metrics": "*", "match": "client_id=app-.*"})
        server.kill()  # SIGKILL right after the acknowledgement
        server = ServeProcess(data, CONFIG).start()
        after_kill = (dynamic_keys(server, "base"), dynamic_keys(server, "fresh"))
        assert server.stop() == 0
    finally:
        server.kill()
    assert first == {"client_metrics": {"base": "OK"}}
    assert after_restart == {"interval.ms": "1000"}
    assert second == {"client_metrics": {"fresh": "OK"}}
    assert after_kill == ({"interval.ms": "1000"}, {"metrics": "*", "match": "client_id=app-.*"})
