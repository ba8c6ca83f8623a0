"""``[meta]``: the local default, the Kafka store's client settings, and what is refused."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from telemetry.errors import ConfigError
from telemetry.metastore.settings import MetaSettings, parse_meta
from telemetry.server.config import settings_from_mapping
from tests.kafka.kafka_dist import free_port

if TYPE_CHECKING:
    from pathlib import Path


def test_local_is_the_default() -> None:
    assert settings_from_mapping({}).meta == MetaSettings()
    assert parse_meta({"store": "local"}).store == "local"


def test_kafka_settings_become_the_clients_settings(tmp_path: Path) -> None:
    cafile = tmp_path / "ca.pem"
    cafile.write_text("-")
    meta = settings_from_mapping(
        {
            "meta": {
                "store": "kafka",
                "bootstrap_servers": "k1:9093,k2:9093",
                "security_protocol": "sasl_ssl",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "kip714",
                "sasl_password": "secret",
                "ssl_cafile": str(cafile),
                "startup_timeout_s": 5,
            }
        }
    ).meta
    assert (meta.topic, meta.startup_timeout_s) == ("_kip714_metadata", 5.0)
    assert meta.client_config() == {
        "bootstrap.servers": "k1:9093,k2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "kip714",
        "sasl.password": "secret",
        "ssl.ca.location": str(cafile),
    }


KAFKA = {"store": "kafka", "bootstrap_servers": "k:1"}


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"store": "zookeeper"}, "meta.store"),
        ({"store": "local", "topic": "t"}, "meta.topic"),
        ({"store": "kafka"}, "meta.bootstrap_servers"),
        ({**KAFKA, "topic": "a/b"}, "meta.topic"),
        ({**KAFKA, "startup_timeout_s": 0}, "meta.startup_timeout_s"),
        ({**KAFKA, "security_protocol": "SASL_PLAINTEXT"}, "meta.security_protocol"),
        ({**KAFKA, "sasl_username": "u"}, "meta.sasl_mechanism"),
        ({**KAFKA, "ssl_cafile": "/nonexistent"}, "meta.ssl_cafile"),
        ({**KAFKA, "partitions": 3}, "meta.partitions"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(section: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_meta(section)
    assert refused.value.key == key


def test_a_password_is_never_shown_in_a_refusal() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_meta({**KAFKA, "sasl_password": 7})
    assert "7" not in str(refused.value)


def test_serve_exits_2_with_one_line_when_the_topic_cannot_be_read_in_time(
    tmp_path: Path,
) -> None:
    unreachable = f"127.0.0.1:{free_port()}"  # nothing listens there
    config = tmp_path / "kip714.toml"
    config.write_text(
        f'[meta]\nstore = "kafka"\nbootstrap_servers = "{unreachable}"\nstartup_timeout_s = 1\n'
    )
    done = subprocess.run(
        [
            sys.executable, "-m", "telemetry", "serve", "--config", str(config),
            "--data-dir", str(tmp_path / "data"),
            "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
        ],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"kip714: cannot start: metadata store topic _kip714_metadata at {unreachable}: "
    )
    assert "within 1 s" in lines[0]
