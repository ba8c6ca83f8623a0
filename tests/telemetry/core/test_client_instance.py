"""Push-interval gating of one instance: Kafka's ``ClientMetricsInstanceTest``, to the ms."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.core.client_instance import ClientInstance, ClientInstanceMetadata, RequestContext
from telemetry.core.client_uuid import Uuid
from telemetry.errors import ErrorCode

T0 = 1_700_000_000_000
INTERVAL = 300_000
CTX = RequestContext(
    client_id="producer-1",
    client_source_address="127.0.0.1",
    client_source_port=56078,
    client_software_name="apache-kafka-java",
    client_software_version="3.5.2",
)


def new_instance(push_interval_ms: int = INTERVAL) -> ClientInstance:
    return ClientInstance(
        metadata=ClientInstanceMetadata.from_context(Uuid(3, 4), CTX),
        subscription_id=0,
        subscription_version=0,
        metrics=(),
        push_interval_ms=push_interval_ms,
    )


def test_fresh_instance_state() -> None:
    instance = new_instance()
    assert (instance.last_get_request_ms, instance.last_push_request_ms) == (0, 0)
    assert not instance.terminating
    assert instance.last_known_error == ErrorCode.NONE
    assert instance.client_instance_id == Uuid(3, 4)
    assert instance.metadata.attribute("client_source_port") == "56078"


def test_first_get_and_push_are_accepted() -> None:
    instance = new_instance()
    assert instance.maybe_update_get_request_timestamp(T0)
    assert instance.maybe_update_push_request_timestamp(T0)


def test_first_request_at_small_clock_is_refused() -> None:
    # Why tests start at a real epoch: timestamps begin at 0.
    assert not new_instance().maybe_update_get_request_timestamp(INTERVAL - 1)
    assert new_instance().maybe_update_get_request_timestamp(INTERVAL)


def test_get_after_elapsed_interval() -> None:
    instance = new_instance()
    assert instance.maybe_update_get_request_timestamp(T0 - INTERVAL)
    assert instance.maybe_update_get_request_timestamp(T0)


def test_get_immediate_retry_fails_and_keeps_the_timestamp() -> None:
    instance = new_instance()
    assert instance.maybe_update_get_request_timestamp(T0)
    assert not instance.maybe_update_get_request_timestamp(T0 + INTERVAL - 1)
    assert instance.last_get_request_ms == T0
    assert instance.maybe_update_get_request_timestamp(T0 + INTERVAL)


def test_push_after_elapsed_interval() -> None:
    instance = new_instance()
    assert instance.maybe_update_push_request_timestamp(T0 - INTERVAL)
    assert instance.maybe_update_push_request_timestamp(T0)


def test_get_right_after_push_fails() -> None:
    instance = new_instance()
    assert instance.maybe_update_push_request_timestamp(T0)
    assert not instance.maybe_update_get_request_timestamp(T0 + 1)


def test_push_immediate_retry_fails() -> None:
    instance = new_instance()
    assert instance.maybe_update_push_request_timestamp(T0)
    assert not instance.maybe_update_push_request_timestamp(T0)
    assert not instance.maybe_update_push_request_timestamp(T0 + INTERVAL - 1)
    assert instance.last_push_request_ms == T0
    assert instance.maybe_update_push_request_timestamp(T0 + INTERVAL)


def test_push_right_after_get_is_accepted_once() -> None:
    instance = new_instance()
    assert instance.maybe_update_push_request_timestamp(T0 - INTERVAL)
    assert instance.maybe_update_get_request_timestamp(T0)
    assert instance.maybe_update_push_request_timestamp(T0 + 1)  # jittered first push
    assert not instance.maybe_update_push_request_timestamp(T0 + 2)


@pytest.mark.parametrize("interval", [0, -1])
def test_interval_must_be_positive(interval: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        new_instance(interval)


@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=3 * 100)), max_size=40))
@settings(max_examples=150, deadline=None)
def test_gating_invariants(requests: list[tuple[bool, int]]) -> None:
    """Accepted GETs are an interval apart from any earlier accepted request;
    accepted pushes are an interval apart unless a GET came in between."""
    instance = new_instance(100)
    now = T0
    accepted: list[tuple[bool, int]] = []
    for is_get, step in requests:
        now += step
        if is_get:
            if instance.maybe_update_get_request_timestamp(now):
                assert all(now - t >= 100 for _, t in accepted)
                accepted.append((True, now))
        elif instance.maybe_update_push_request_timestamp(now):
            last_push = max((t for g, t in accepted if not g), default=0)
            got_since = any(g and t > last_push for g, t in accepted)
            assert got_since or now - last_push >= 100
            accepted.append((False, now))
    assert instance.last_get_request_ms == max((t for g, t in accepted if g), default=0)
    assert instance.last_push_request_ms == max((t for g, t in accepted if not g), default=0)
