from __future__ import annotations

import pytest

from quotas import (
    ConnectionQuotas,
    ConnectionThrottledError,
    MetricName,
    TooManyConnectionsError,
)
from tests.quotas.conftest import T0

GROUP = "socket-server-metrics"


def test_per_ip_count_refuses_past_the_limit_and_keeps_the_refused_connection_counted() -> None:
    quotas = ConnectionQuotas(max_connections_per_ip=2)
    assert quotas.inc("client", "10.0.0.1", T0) == 0
    assert quotas.inc("client", "10.0.0.1", T0) == 0
    with pytest.raises(TooManyConnectionsError) as caught:
        quotas.inc("client", "10.0.0.1", T0)
    assert caught.value.count == 2
    assert quotas.get("10.0.0.1") == 3  # counted until the server closes it
    quotas.dec("client", "10.0.0.1")
    assert quotas.get("10.0.0.1") == 2
    assert quotas.inc("client", "10.0.0.2", T0) == 0  # other IPs are unaffected


def test_per_ip_overrides_and_updates() -> None:
    quotas = ConnectionQuotas(max_connections_per_ip=1, max_connections_per_ip_overrides={"::1": 3})
    for _ in range(3):
        quotas.inc("client", "0:0:0:0:0:0:0:1", T0)  # normalised to ::1
    assert quotas.get("::1") == 3
    quotas.update_max_connections_per_ip(5, {})
    quotas.inc("client", "::1", T0)  # the 4th and 5th fit under 5
    quotas.inc("client", "::1", T0)
    with pytest.raises(TooManyConnectionsError):
        quotas.inc("client", "::1", T0)


def test_dec_of_an_unknown_address_is_an_error() -> None:
    with pytest.raises(ValueError, match="no connections"):
        ConnectionQuotas().dec("client", "10.9.9.9")


def test_broker_creation_rate_makes_the_acceptor_wait_at_most_one_window() -> None:
    quotas = ConnectionQuotas(max_connection_creation_rate=2)
    # 2/s over the padded 10 s window: 20 connections fit.
    for _ in range(20):
        assert quotas.inc("client", "10.0.0.1", T0) == 0
    # 21/10 s = 2.1/s: (2.1 − 2) / 2 × 10 000 = 500 ms.
    assert quotas.inc("client", "10.0.0.1", T0) == 500
    for _ in range(30):
        quotas.inc("client", "10.0.0.1", T0)
    assert quotas.inc("client", "10.0.0.1", T0) == 1000  # bounded to one window
    throttle = quotas.metrics.metric(
        MetricName("connection-accept-throttle-time", GROUP, (("listener", "client"),))
    )
    assert throttle is not None and throttle.measurable_value(T0) == pytest.approx(
        (500 + 1000 * 31) / 32, rel=0.05
    )


def test_listener_rate_limit_waits_too() -> None:
    quotas = ConnectionQuotas()
    quotas.add_listener("client", max_connection_creation_rate=1)
    for _ in range(10):
        assert quotas.inc("client", "10.0.0.1", T0) == 0
    assert quotas.inc("client", "10.0.0.1", T0) == 1000
    assert quotas.inc("other", "10.0.0.1", T0) == 0


def test_ip_rate_violation_unrecords_and_refuses() -> None:
    quotas = ConnectionQuotas()
    quotas.add_listener("client")
    quotas.update_ip_connection_rate_quota("10.0.0.7", 2)
    assert quotas.connection_rate_for_ip("10.0.0.7") == 2
    for _ in range(20):
        quotas.inc("client", "10.0.0.7", T0)
    with pytest.raises(ConnectionThrottledError) as caught:
        quotas.inc("client", "10.0.0.7", T0)
    assert caught.value.throttle_time_ms == 500
    assert caught.value.start_throttle_time_ms == T0
    assert quotas.get("10.0.0.7") == 20  # the refused connection is not counted
    broker = quotas.metrics.metric(MetricName("broker-connection-accept-rate", GROUP))
    ip_rate = quotas.metrics.metric(
        MetricName("connection-accept-rate", GROUP, (("ip", "10.0.0.7"),))
    )
    assert broker is not None and broker.measurable_value(T0) == pytest.approx(2.0)
    assert ip_rate is not None and ip_rate.measurable_value(T0) == pytest.approx(2.0)
    # Another IP is not limited (no default IP rate).
    quotas.inc("client", "10.0.0.8", T0)


def test_default_ip_rate_updates_existing_sensors_and_can_be_removed() -> None:
    quotas = ConnectionQuotas()
    quotas.update_ip_connection_rate_quota(None, 1)
    for _ in range(10):
        quotas.inc("client", "10.0.0.9", T0)
    with pytest.raises(ConnectionThrottledError):
        quotas.inc("client", "10.0.0.9", T0)
    quotas.update_ip_connection_rate_quota(None, 100)
    quotas.inc("client", "10.0.0.9", T0)
    ip_rate = quotas.metrics.metric(
        MetricName("connection-accept-rate", GROUP, (("ip", "10.0.0.9"),))
    )
    assert ip_rate is not None and ip_rate.config.quota is not None
    assert ip_rate.config.quota.bound == 100
    quotas.update_ip_connection_rate_quota(None, None)
    assert quotas.connection_rate_for_ip("10.0.0.9") == 2**31 - 1


def test_protected_listener_bypasses_broker_wide_limits() -> None:
    quotas = ConnectionQuotas(
        max_connections=2, max_connection_creation_rate=1, protected_listener="admin"
    )
    quotas.add_listener("client")
    quotas.add_listener("admin")
    for _ in range(2):
        quotas.inc("client", "10.0.0.1", T0)
    assert not quotas.connection_slot_available("client")
    assert quotas.connection_slot_available("admin")
    # The broker rate (1/s, 10 s window) is exhausted for clients but not for admin.
    for _ in range(8):
        quotas.inc("client", "10.0.0.1", T0)
    assert quotas.inc("client", "10.0.0.1", T0) == 1000
    assert quotas.inc("admin", "10.0.0.2", T0) == 0
    assert quotas.max_connections_exceeded("client")
    assert not quotas.max_connections_exceeded("admin")


def test_protection_needs_more_than_one_listener() -> None:
    quotas = ConnectionQuotas(max_connections=1, protected_listener="admin")
    quotas.add_listener("admin")
    quotas.inc("admin", "10.0.0.1", T0)
    assert not quotas.connection_slot_available("admin")


def test_listener_connection_limit() -> None:
    quotas = ConnectionQuotas()
    quotas.add_listener("client", max_connections=1)
    quotas.inc("client", "10.0.0.1", T0)
    assert quotas.listener_count("client") == 1
    assert not quotas.connection_slot_available("client")
    quotas.dec("client", "10.0.0.1")
    assert quotas.connection_slot_available("client")
    assert quotas.total_count == 0
    quotas.update_listener("client", max_connections=5, max_connection_creation_rate=10)
    quotas.remove_listener("client")
    assert quotas.metrics.get_sensor("Connection-Accept-Rate-client") is None
