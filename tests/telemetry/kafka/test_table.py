"""The one table of served Kafka APIs: one handler per key, ApiVersions lists rows in order."""

from __future__ import annotations

import pytest

from telemetry.kafka.connection_state import ConnectionState
from telemetry.kafka.table import ApiTable


def _answer(state: ConnectionState, frame: bytes, started_ns: int) -> tuple[bytes, int]:
    return frame, started_ns


def test_rows_are_advertised_in_registration_order() -> None:
    table = ApiTable(lambda state, started_ns, mutation_ms: mutation_ms)
    table.register(18, "ApiVersions", (0, 4), _answer)
    table.register(3, "Metadata", (0, 12), _answer)
    table.register(17, "SaslHandshake", (0, 1), _answer)
    assert [(v.api_key, v.min_version, v.max_version) for v in table.advertised] == [
        (18, 0, 4),
        (3, 0, 12),
        (17, 0, 1),
    ]
    served = table.get(3)
    assert served is not None and served.name == "Metadata"
    assert served.handler(ConnectionState("c", "127.0.0.1", 1), b"x", 7) == (b"x", 7)
    assert table.get(72) is None


def test_a_key_is_served_by_one_handler_only() -> None:
    table = ApiTable(lambda state, started_ns, mutation_ms: 0)
    table.register(32, "DescribeConfigs", (1, 4), _answer)
    with pytest.raises(ValueError, match="already served by DescribeConfigs"):
        table.register(32, "Other", (0, 0), _answer)
    assert [v.api_key for v in table.advertised] == [32]
