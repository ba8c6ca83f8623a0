"""``[log] store``: the local default, the Kafka keys (its own or [meta]'s), refusals at start."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from telemetry.cluster.connection import ClusterConnection
from telemetry.errors import ConfigError, ErrorCode
from telemetry.ingest.config import LogConfig, parse_log
from telemetry.server.config import settings_from_mapping
from tests.kafka.kafka_dist import free_port
from tests.telemetry.kafka_wire_client import fresh_push
from tests.telemetry.serve_process import ServeProcess

KAFKA = {"store": "kafka", "bootstrap_servers": "k1:9092,k2:9092"}


def test_local_is_the_default() -> None:
    log = settings_from_mapping({}).log
    assert (log.store, log.cluster) == ("local", None)
    assert log == LogConfig()


def test_kafka_settings_of_its_own() -> None:
    log = settings_from_mapping({"log": {**KAFKA, "partitions": 6, "startup_timeout_s": 4}}).log
    assert (log.store, log.topic, log.partitions) == ("kafka", "_kip714_pushes", 6)
    assert log.cluster == ClusterConnection(
        bootstrap_servers="k1:9092,k2:9092", startup_timeout_s=4
    )
    assert log.cluster.client_config() == {
        "bootstrap.servers": "k1:9092,k2:9092",
        "security.protocol": "PLAINTEXT",
    }


def test_without_bootstrap_servers_the_log_shares_metas_connection() -> None:
    meta = {
        "store": "kafka",
        "bootstrap_servers": "m:9093",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "kip714",
        "sasl_password": "secret",
        "startup_timeout_s": 9,
    }
    log = settings_from_mapping({"meta": meta, "log": {"store": "kafka"}}).log
    assert log.cluster is not None
    assert log.cluster.client_config()["sasl.username"] == "kip714"
    assert (log.cluster.bootstrap_servers, log.cluster.startup_timeout_s) == ("m:9093", 9.0)
    shorter = settings_from_mapping(
        {"meta": meta, "log": {"store": "kafka", "startup_timeout_s": 2}}
    ).log
    assert shorter.cluster is not None and shorter.cluster.startup_timeout_s == 2.0


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"store": "s3"}, "log.store"),
        ({"store": "kafka"}, "log.bootstrap_servers"),  # and [meta] is local
        ({"store": "local", "topic": "t"}, "log.topic"),
        ({"bootstrap_servers": "k:1"}, "log.bootstrap_servers"),
        ({**KAFKA, "max_bytes": 1 << 30}, "log.max_bytes"),
        ({**KAFKA, "segment_bytes": 1 << 20}, "log.segment_bytes"),
        ({**KAFKA, "topic": "a/b"}, "log.topic"),
        ({**KAFKA, "partitions": 0}, "log.partitions"),
        ({**KAFKA, "startup_timeout_s": 0}, "log.startup_timeout_s"),
        ({**KAFKA, "security_protocol": "SASL_SSL"}, "log.security_protocol"),
        ({**KAFKA, "ssl_cafile": "/nonexistent"}, "log.ssl_cafile"),
        ({"store": "kafka", "sasl_username": "u"}, "log.sasl_username"),
        ({**KAFKA, "replication": 3}, "log.replication"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(section: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_log(section)
    assert refused.value.key == key


def test_a_password_is_never_shown_in_a_refusal() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_log({"store": "kafka", "sasl_password": "hunter2"})
    assert "hunter2" not in str(refused.value)


def serve(tmp_path: Path, config: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "kip714.toml"
    path.write_text(config)
    return subprocess.run(
        [
            sys.executable, "-m", "telemetry", "serve", "--config", str(path),
            "--data-dir", str(data_dir),
            "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
        ],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_serve_exits_2_with_one_line_when_the_cluster_does_not_answer_in_time(
    tmp_path: Path,
) -> None:
    unreachable = f"127.0.0.1:{free_port()}"  # nothing listens there
    done = serve(
        tmp_path,
        f'[log]\nstore = "kafka"\nbootstrap_servers = "{unreachable}"\nstartup_timeout_s = 1\n',
        tmp_path / "data",
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"kip714: cannot start: ingest log topic _kip714_pushes at {unreachable}: "
    )
    assert "within 1 s" in lines[0]


def test_a_local_log_with_unexported_pushes_refuses_the_move_to_kafka(tmp_path: Path) -> None:
    """No exporter took the pushes of the local log: moving to Kafka would strand them."""
    data_dir = tmp_path / "data"
    local = ServeProcess(data_dir, "[exporters.landing]\nenabled = false\n").start()
    try:
        answer = asyncio.run(fresh_push(local.kafka, "before-the-move"))
        assert answer.error_code == ErrorCode.NONE
    finally:
        assert local.stop() == 0
    unreachable = f"127.0.0.1:{free_port()}"  # refused before the cluster is asked
    done = serve(
        tmp_path,
        f'[exporters.landing]\nenabled = false\n[log]\nstore = "kafka"\n'
        f'bootstrap_servers = "{unreachable}"\nstartup_timeout_s = 30\n',
        data_dir,
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "holds 1 pushes" in lines[0]
    assert 'run once with [log] store = "local" until `kip714 log status` shows no lag' in lines[0]
