"""``[quotas]`` and ``[limits]``: the documented example loads; a bad value is one ConfigError."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from telemetry.enforcement import (
    ClientQuotaSettings,
    IpQuotaSettings,
    LimitSettings,
    QuotaSettings,
)
from telemetry.errors import ConfigError
from telemetry.server.config import settings_from_mapping

EXAMPLE = """
[quotas]
window_num = 11
window_size_s = 1

[[quotas.clients]]
user = "alice"
client_id = "orders-service"
push_byte_rate = 1048576
request_percentage = 25.0
controller_mutation_rate = 5.0

[[quotas.clients]]
client_id = "<default>"
push_byte_rate = 2048
push_decoded_byte_rate = 1048576

[[quotas.ips]]
ip = "<default>"
connection_creation_rate = 20

[[quotas.ips]]
ip = "::ffff:0:0"
connection_creation_rate = 5

[limits]
max_connections = 500
max_connections_per_ip = 50
max_connection_creation_rate = 100
connections_max_idle_ms = 60000
queued_max_request_bytes = 10485760
partial_frame_timeout_ms = 5000
"""


def test_the_documented_example_loads() -> None:
    settings = settings_from_mapping(tomllib.loads(EXAMPLE))
    assert settings.quotas == QuotaSettings(
        window_num=11,
        window_size_s=1,
        clients=(
            ClientQuotaSettings(
                user="alice",
                client_id="orders-service",
                push_byte_rate=1048576.0,
                request_percentage=25.0,
                controller_mutation_rate=5.0,
            ),
            ClientQuotaSettings(
                client_id="<default>", push_byte_rate=2048.0, push_decoded_byte_rate=1048576.0
            ),
        ),
        ips=(
            IpQuotaSettings(ip="<default>", connection_creation_rate=20),
            IpQuotaSettings(ip="::ffff:0:0", connection_creation_rate=5),
        ),
    )
    assert settings.limits == LimitSettings(
        max_connections=500,
        max_connections_per_ip=50,
        max_connection_creation_rate=100,
        connections_max_idle_ms=60000,
        queued_max_request_bytes=10485760,
        partial_frame_timeout_ms=5000,
    )


def test_defaults_have_no_quota_and_kafka_like_limits() -> None:
    settings = settings_from_mapping({})
    assert settings.quotas == QuotaSettings()
    assert settings.quotas.clients == ()
    assert settings.limits == LimitSettings(
        max_connections=10_000,
        max_connections_per_ip=1_000,
        max_connection_creation_rate=1_000,
        connections_max_idle_ms=600_000,
        queued_max_request_bytes=104_857_600,
        partial_frame_timeout_ms=10_000,
    )


@pytest.mark.parametrize(
    ("document", "key"),
    [
        ({"quotas": {"window_nums": 3}}, "quotas.window_nums"),
        ({"quotas": {"window_num": 0}}, "quotas.window_num"),
        ({"quotas": {"window_size_s": "1"}}, "quotas.window_size_s"),
        ({"quotas": {"clients": {"user": "a"}}}, "quotas.clients"),
        ({"quotas": {"clients": [{"push_byte_rate": 1}]}}, "quotas.clients[0]"),
        ({"quotas": {"clients": [{"user": "a"}]}}, "quotas.clients[0]"),
        ({"quotas": {"clients": [{"user": "a", "byte_rate": 1}]}}, "quotas.clients[0].byte_rate"),
        ({"quotas": {"clients": [{"user": "", "push_byte_rate": 1}]}}, "quotas.clients[0].user"),
        (
            {"quotas": {"clients": [{"client_id": "c", "push_byte_rate": 0}]}},
            "quotas.clients[0].push_byte_rate",
        ),
        (
            {"quotas": {"clients": [{"client_id": "c", "request_percentage": True}]}},
            "quotas.clients[0].request_percentage",
        ),
        (
            {"quotas": {"clients": [{"client_id": "c", "push_decoded_byte_rate": -1}]}},
            "quotas.clients[0].push_decoded_byte_rate",
        ),
        (
            {
                "quotas": {
                    "clients": [
                        {"client_id": "c", "push_byte_rate": 1},
                        {"client_id": "c", "request_percentage": 1},
                    ]
                }
            },
            "quotas.clients[1]",
        ),
        (
            {"quotas": {"ips": [{"ip": "not-an-ip", "connection_creation_rate": 1}]}},
            "quotas.ips[0].ip",
        ),
        ({"quotas": {"ips": [{"ip": "10.0.0.1"}]}}, "quotas.ips[0]"),
        (
            {"quotas": {"ips": [{"ip": "10.0.0.1", "connection_creation_rate": 0}]}},
            "quotas.ips[0].connection_creation_rate",
        ),
        ({"limits": {"max_connection": 1}}, "limits.max_connection"),
        ({"limits": {"max_connections": 0}}, "limits.max_connections"),
        ({"limits": {"max_connections_per_ip": 2**31}}, "limits.max_connections_per_ip"),
        ({"limits": {"connections_max_idle_ms": 1.5}}, "limits.connections_max_idle_ms"),
        ({"limits": {"queued_max_request_bytes": 1024}}, "limits.queued_max_request_bytes"),
        ({"limits": {"partial_frame_timeout_ms": 0}}, "limits.partial_frame_timeout_ms"),
        ({"limits": {"partial_frame_timeout_ms": 2**31}}, "limits.partial_frame_timeout_ms"),
    ],
)
def test_bad_values_name_the_key(document: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from_mapping(document)
    assert refused.value.key == key
    assert "\n" not in str(refused.value)
