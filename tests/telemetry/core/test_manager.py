"""TelemetryManager: Kafka's ClientMetricsManagerTest cases plus kip714's deviations.

The clock starts at T0 like Kafka's ``MockTime`` (wall-clock epoch), because
instance timestamps start at 0 and the first request's gate depends on it.
"""

from __future__ import annotations

import gzip
import itertools
from dataclasses import replace

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.core.client_instance import ClientInstance, RequestContext
from telemetry.core.client_uuid import ONE_UUID, ZERO_UUID, Uuid
from telemetry.core.codecs import CompressionType
from telemetry.core.manager import (
    AcceptedPush,
    DeferredPush,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryResponse,
    TelemetryManager,
)
from telemetry.core.settings import TelemetryConfig
from telemetry.errors import ConfigError, ErrorCode

T0 = 1_700_000_000_000
DEFAULT_INTERVAL_MS = 30_000
DEFAULT_PROPERTIES: dict[str, object] = {
    "metrics": "org.apache.kafka.client.producer.partition.queue.,"
    "org.apache.kafka.client.producer.partition.latency",
    "interval.ms": str(DEFAULT_INTERVAL_MS),
    "match": "client_software_name=apache-kafka-java,client_software_version=3.5.*",
}
CTX = RequestContext(
    client_id="producer-1",
    client_source_address="127.0.0.1",
    client_source_port=56078,
    client_software_name="apache-kafka-java",
    client_software_version="3.5.2",
    connection_id="1",
)


def new_manager(**config: int) -> TelemetryManager:
    settings_ = {"max_bytes": 100, "max_decompressed_bytes": 1000, **config}
    return TelemetryManager(TelemetryConfig(**settings_))


def get(
    manager: TelemetryManager, now_ms: int, uuid: Uuid | None = None, ctx: RequestContext = CTX
) -> GetTelemetrySubscriptionsResponse:
    return manager.get_telemetry_subscriptions(uuid, ctx, now_ms)


def validate(
    manager: TelemetryManager,
    now_ms: int,
    uuid: Uuid | None,
    subscription_id: int,
    *,
    terminating: bool = False,
    compression: int = 0,
    metrics: bytes | None = b"test-data",
    ctx: RequestContext = CTX,
) -> AcceptedPush | PushTelemetryResponse:
    result = manager.validate_push(
        client_instance_id=uuid,
        subscription_id=subscription_id,
        terminating=terminating,
        compression_type=compression,
        metrics=metrics,
        context=ctx,
        now_ms=now_ms,
    )
    assert not isinstance(result, DeferredPush)  # only with inline_max_bytes
    return result


def push(
    manager: TelemetryManager,
    now_ms: int,
    uuid: Uuid | None,
    subscription_id: int,
    **kwargs: object,
) -> PushTelemetryResponse:
    """Validate, then complete as if the log append succeeded."""
    result = validate(manager, now_ms, uuid, subscription_id, **kwargs)  # type: ignore[arg-type]
    if isinstance(result, PushTelemetryResponse):
        return result
    return manager.complete_push(result)


def instance_of(manager: TelemetryManager, uuid: Uuid) -> ClientInstance:
    found = manager.client_instance(uuid)
    assert found is not None
    return found


# --- subscriptions ---------------------------------------------------------------


def test_update_subscription() -> None:
    manager = new_manager()
    assert manager.subscriptions.version == 0
    manager.update_subscription("sub-1", DEFAULT_PROPERTIES)
    subscription = manager.subscriptions.get("sub-1")
    assert subscription is not None
    assert subscription.interval_ms == DEFAULT_INTERVAL_MS
    assert len(subscription.metrics) == 2
    assert set(subscription.match) == {"client_software_name", "client_software_version"}
    assert manager.subscriptions.version == 1


def test_update_subscription_with_empty_properties_and_deletion() -> None:
    manager = new_manager()
    manager.update_subscription("sub-1", {})
    assert (len(manager.subscriptions), manager.subscriptions.version) == (0, 0)
    manager.update_subscription("sub-1", {"interval.ms": "100"})
    assert (len(manager.subscriptions), manager.subscriptions.version) == (1, 1)
    manager.update_subscription("sub-1", {})
    assert (len(manager.subscriptions), manager.subscriptions.version) == (0, 2)


# --- GetTelemetrySubscriptions --------------------------------------------------


def test_get_telemetry() -> None:
    manager = new_manager()
    manager.update_subscription("sub-1", DEFAULT_PROPERTIES)
    response = get(manager, T0)
    assert response.error_code == ErrorCode.NONE
    assert response.client_instance_id != ZERO_UUID
    assert response.subscription_id != 0
    assert sorted(response.requested_metrics) == sorted(
        str(DEFAULT_PROPERTIES["metrics"]).split(",")
    )
    assert list(response.accepted_compression_types) == [4, 3, 1, 2]
    assert response.push_interval_ms == DEFAULT_INTERVAL_MS
    assert response.delta_temporality is True
    assert response.telemetry_max_bytes == 100
    assert response.throttle_time_ms == 0
    assert instance_of(manager, response.client_instance_id).last_known_error == ErrorCode.NONE


def test_get_telemetry_without_subscription() -> None:
    manager = new_manager()
    response = get(manager, T0)
    assert response.error_code == ErrorCode.NONE
    assert response.subscription_id != 0
    assert response.requested_metrics == ()
    assert response.push_interval_ms == 300_000


def test_get_telemetry_all_metrics() -> None:
    manager = new_manager()
    manager.update_subscription("sub-1", DEFAULT_PROPERTIES)
    manager.update_subscription("sub-2", {"metrics": "*"})
    response = get(manager, T0)
    assert response.requested_metrics == ("*",)
    assert response.push_interval_ms == DEFAULT_INTERVAL_MS


def test_get_after_push_interval_and_throttled_before_to_the_ms() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid = first.client_instance_id
    before = get(manager, T0 + 299_999, uuid)
    assert before == GetTelemetrySubscriptionsResponse(
        error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED
    )
    # A refused GET changes neither the timestamp nor the last error.
    assert instance_of(manager, uuid).last_get_request_ms == T0
    assert get(manager, T0 + 300_000, uuid).error_code == ErrorCode.NONE
    assert manager.stats.throttled == 1


def test_get_same_client_immediate_retry_is_throttled() -> None:
    manager = new_manager()
    uuid = get(manager, T0).client_instance_id
    response = get(manager, T0, uuid)
    assert response.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert response.client_instance_id == ZERO_UUID  # error responses carry defaults
    assert response.throttle_time_ms == 0
    assert instance_of(manager, uuid).last_known_error == ErrorCode.NONE


def test_get_right_after_push_on_a_new_server_is_throttled() -> None:
    first = get(new_manager(), T0)
    other = new_manager()  # another broker: no instance, same subscription id
    assert (
        push(other, T0, first.client_instance_id, first.subscription_id).error_code
        == ErrorCode.NONE
    )
    assert (
        get(other, T0, first.client_instance_id).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    )


def test_get_after_subscription_update_is_not_throttled_and_gets_a_new_id() -> None:
    manager = new_manager()
    manager.update_subscription("sub-1", DEFAULT_PROPERTIES)
    first = get(manager, T0)
    manager.update_subscription("sub-2", {"metrics": "*"})
    second = get(manager, T0, first.client_instance_id)
    assert second.error_code == ErrorCode.NONE
    assert second.subscription_id != first.subscription_id
    assert second.requested_metrics == ("*",)


@pytest.mark.parametrize(
    ("compression", "subscription_delta", "expected"),
    [
        (CompressionType.NONE, 1, ErrorCode.UNKNOWN_SUBSCRIPTION_ID),
        (100, 0, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    ],
)
def test_get_is_exempt_from_the_gate_after_117_and_76(
    compression: int, subscription_delta: int, expected: ErrorCode
) -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid = first.client_instance_id
    refused = push(
        manager, T0 + 10, uuid, first.subscription_id + subscription_delta, compression=compression
    )
    assert refused.error_code == expected
    again = get(manager, T0 + 11, uuid)  # clients re-GET at once after these
    assert again.error_code == ErrorCode.NONE
    assert again.subscription_id == first.subscription_id
    assert instance_of(manager, uuid).last_known_error == ErrorCode.NONE
    # Unlike Kafka, the exempted GET counts as a GET: the client's first push
    # after it is accepted (no interval lost after a subscription change) ...
    assert push(manager, T0 + 12, uuid, first.subscription_id).error_code == ErrorCode.NONE
    # ... and the gate applies again to the push after that.
    assert push(manager, T0 + 13, uuid, first.subscription_id).error_code == (
        ErrorCode.THROTTLING_QUOTA_EXCEEDED
    )


def test_get_is_not_exempt_after_other_push_errors() -> None:
    manager = new_manager(max_bytes=1, max_decompressed_bytes=1)
    first = get(manager, T0)
    uuid = first.client_instance_id
    assert push(manager, T0 + 1, uuid, first.subscription_id, metrics=b"ab").error_code == (
        ErrorCode.TELEMETRY_TOO_LARGE
    )
    assert get(manager, T0 + 2, uuid).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED


def test_get_with_unknown_non_zero_id_creates_that_instance() -> None:
    manager = new_manager()
    uuid = Uuid(42, 42)
    response = get(manager, T0, uuid)
    assert response.client_instance_id == uuid
    assert manager.client_instance(uuid) is not None


def test_get_with_one_uuid_is_not_refused() -> None:
    manager = new_manager()
    response = get(manager, T0, ONE_UUID)
    assert response.error_code == ErrorCode.NONE
    assert response.client_instance_id == ONE_UUID


def test_new_ids_avoid_cached_instances() -> None:
    taken, fresh = Uuid(5, 5), Uuid(6, 6)
    draws = iter([taken, taken, fresh])
    manager = TelemetryManager(TelemetryConfig(), random_uuid=lambda: next(draws))
    get(manager, T0, taken)
    assert get(manager, T0).client_instance_id == fresh


def test_subscription_id_matches_the_instance_id_pattern() -> None:
    manager = new_manager()
    uuid = Uuid(1, 2)
    manager.update_subscription(
        "mine", {"metrics": "x.", "interval.ms": "1000", "match": f"client_instance_id={uuid}"}
    )
    assert get(manager, T0, uuid).requested_metrics == ("x.",)
    assert get(manager, T0, Uuid(1, 3)).requested_metrics == ()


@given(st.lists(st.integers(min_value=100, max_value=3_600_000), max_size=4))
@settings(max_examples=40, deadline=None)
def test_push_interval_is_never_zero(intervals: list[int]) -> None:
    manager = new_manager()
    for index, interval in enumerate(intervals):
        manager.update_subscription(f"s{index}", {"metrics": "a.", "interval.ms": interval})
    response = get(manager, T0)
    assert 100 <= response.push_interval_ms <= 300_000
    assert response.push_interval_ms == min([300_000, *intervals])


# --- PushTelemetry ---------------------------------------------------------------


def test_push_telemetry() -> None:
    manager = new_manager()
    manager.update_subscription("sub-1", DEFAULT_PROPERTIES)
    first = get(manager, T0)
    response = push(manager, T0 + 1, first.client_instance_id, first.subscription_id)
    assert response == PushTelemetryResponse()
    instance = instance_of(manager, first.client_instance_id)
    assert not instance.terminating
    assert instance.last_known_error == ErrorCode.NONE


def test_push_on_new_server_without_get() -> None:
    first = get(new_manager(), T0)
    other = new_manager()
    response = push(other, T0, first.client_instance_id, first.subscription_id, metrics=None)
    assert response.error_code == ErrorCode.NONE


def test_push_after_push_interval_to_the_ms() -> None:
    manager = new_manager()
    manager.update_subscription("sub-1", DEFAULT_PROPERTIES)
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert push(manager, T0 + 100, uuid, sid).error_code == ErrorCode.NONE  # after a GET: early ok
    assert push(manager, T0 + 100 + 29_999, uuid, sid).error_code == (
        ErrorCode.THROTTLING_QUOTA_EXCEEDED
    )
    assert push(manager, T0 + 100 + 30_000, uuid, sid).error_code == ErrorCode.NONE


@pytest.mark.parametrize("uuid", [None, ZERO_UUID, ONE_UUID])
def test_push_with_reserved_id_is_invalid_request_and_touches_nothing(uuid: Uuid | None) -> None:
    manager = new_manager()
    response = push(manager, T0, uuid, 0)
    assert response == PushTelemetryResponse(error_code=ErrorCode.INVALID_REQUEST)
    assert manager.instance_count == 0
    assert manager.stats.push_responses[ErrorCode.INVALID_REQUEST] == 1


def test_push_throttle_error() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert push(manager, T0, uuid, sid, metrics=None).error_code == ErrorCode.NONE
    second = push(manager, T0, uuid, sid, metrics=None)
    assert second == PushTelemetryResponse(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED)
    instance = instance_of(manager, uuid)
    assert not instance.terminating
    assert instance.last_known_error == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert manager.stats.throttled == 1


def test_terminating_push_bypasses_the_gate_once_then_invalid_request() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert push(manager, T0, uuid, sid).error_code == ErrorCode.NONE
    assert push(manager, T0 + 1, uuid, sid, terminating=True).error_code == ErrorCode.NONE
    instance = instance_of(manager, uuid)
    assert instance.terminating
    assert instance.last_known_error == ErrorCode.NONE
    later = push(manager, T0 + 100_000, uuid, sid, terminating=True)
    assert later.error_code == ErrorCode.INVALID_REQUEST
    assert instance_of(manager, uuid).terminating
    assert instance_of(manager, uuid).last_known_error == ErrorCode.INVALID_REQUEST
    assert push(manager, T0 + 400_000, uuid, sid).error_code == ErrorCode.INVALID_REQUEST


def test_failed_terminating_push_does_not_lock_the_instance_kafka_20898() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    refused = push(manager, T0, uuid, sid + 1, terminating=True)
    assert refused.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    assert not instance_of(manager, uuid).terminating  # Kafka would set it here
    assert get(manager, T0 + 1, uuid).error_code == ErrorCode.NONE
    assert push(manager, T0 + 2, uuid, sid, terminating=True).error_code == ErrorCode.NONE
    assert instance_of(manager, uuid).terminating


def test_subscription_id_invalid() -> None:
    manager = new_manager()
    first = get(manager, T0)
    response = push(manager, T0, first.client_instance_id, 1234)
    assert response.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    instance = instance_of(manager, first.client_instance_id)
    assert not instance.terminating
    assert instance.last_known_error == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    assert manager.stats.unknown_subscription == 1


@pytest.mark.parametrize("compression", [5, 100, -1, 127])
def test_compression_type_invalid(compression: int) -> None:
    manager = new_manager()
    first = get(manager, T0)
    response = push(
        manager, T0, first.client_instance_id, first.subscription_id, compression=compression
    )
    assert response.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert instance_of(manager, first.client_instance_id).last_known_error == (
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    )


@pytest.mark.parametrize("metrics", [None, b""])
def test_null_or_empty_metrics_are_accepted_with_no_data(metrics: bytes | None) -> None:
    manager = new_manager()
    first = get(manager, T0)
    accepted = validate(
        manager, T0, first.client_instance_id, first.subscription_id, compression=4, metrics=metrics
    )
    assert isinstance(accepted, AcceptedPush)
    assert (accepted.data, accepted.data_size) == (b"", 0)
    assert manager.complete_push(accepted).error_code == ErrorCode.NONE


def test_metrics_too_large_as_sent() -> None:
    manager = new_manager(max_bytes=1, max_decompressed_bytes=1)
    first = get(manager, T0)
    response = push(manager, T0, first.client_instance_id, first.subscription_id, metrics=b"ab")
    assert response.error_code == ErrorCode.TELEMETRY_TOO_LARGE
    instance = instance_of(manager, first.client_instance_id)
    assert not instance.terminating
    assert instance.last_known_error == ErrorCode.TELEMETRY_TOO_LARGE


def test_decompressed_too_large_is_118_not_87_kafka_21076() -> None:
    manager = new_manager(max_bytes=1000, max_decompressed_bytes=5000)
    first = get(manager, T0)
    compressor = zstandard.ZstdCompressor().compressobj()
    bomb = compressor.compress(bytes(10_000_000)) + compressor.flush()
    assert len(bomb) <= 1000
    response = push(
        manager, T0, first.client_instance_id, first.subscription_id, compression=4, metrics=bomb
    )
    assert response.error_code == ErrorCode.TELEMETRY_TOO_LARGE
    assert instance_of(manager, first.client_instance_id).last_known_error == (
        ErrorCode.TELEMETRY_TOO_LARGE
    )


def test_corrupt_payload_is_invalid_record() -> None:
    manager = new_manager()
    first = get(manager, T0)
    response = push(
        manager, T0, first.client_instance_id, first.subscription_id, compression=1, metrics=b"xx"
    )
    assert response.error_code == ErrorCode.INVALID_RECORD
    assert instance_of(manager, first.client_instance_id).last_known_error == (
        ErrorCode.INVALID_RECORD
    )


def test_accepted_push_carries_what_the_log_needs() -> None:
    manager = new_manager()
    manager.update_subscription("sub-1", DEFAULT_PROPERTIES)
    first = get(manager, T0)
    payload = b"otlp metrics data"
    compressor = zstandard.ZstdCompressor().compressobj()
    sent = compressor.compress(payload) + compressor.flush()
    accepted = validate(
        manager,
        T0 + 5,
        first.client_instance_id,
        first.subscription_id,
        terminating=True,
        compression=4,
        metrics=sent,
    )
    assert isinstance(accepted, AcceptedPush)
    assert accepted.client_instance_id == first.client_instance_id
    assert accepted.subscription_id == first.subscription_id
    assert accepted.context == CTX
    assert accepted.metadata.client_software_name == "apache-kafka-java"
    assert accepted.push_interval_ms == DEFAULT_INTERVAL_MS
    assert accepted.terminating
    assert accepted.compression_type is CompressionType.ZSTD
    assert accepted.received_ms == T0 + 5
    # The log keeps the payload as sent and decompresses on read.
    assert accepted.data == sent
    assert accepted.data_size == len(payload)
    # Not terminating until the append succeeds.
    assert not instance_of(manager, first.client_instance_id).terminating


def test_failed_append_records_the_error_and_never_sets_terminating() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    accepted = validate(manager, T0, uuid, sid, terminating=True)
    assert isinstance(accepted, AcceptedPush)
    response = manager.complete_push(
        accepted, ErrorCode.THROTTLING_QUOTA_EXCEEDED, throttle_time_ms=2**40
    )
    assert response == PushTelemetryResponse(
        throttle_time_ms=2**31 - 1, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED
    )
    instance = instance_of(manager, uuid)
    assert not instance.terminating
    assert instance.last_known_error == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert manager.stats.push_responses[ErrorCode.THROTTLING_QUOTA_EXCEEDED] == 1


# --- order of checks -------------------------------------------------------------


def test_terminating_check_comes_before_the_gate() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    push(manager, T0, uuid, sid, terminating=True)
    assert push(manager, T0, uuid, sid).error_code == ErrorCode.INVALID_REQUEST


def test_gate_comes_before_subscription_id() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    push(manager, T0, uuid, sid)
    assert push(manager, T0 + 1, uuid, sid + 1).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED


def test_gate_slot_is_consumed_even_when_a_later_check_fails() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert push(manager, T0 + 1, uuid, sid, metrics=b"x" * 101).error_code == (
        ErrorCode.TELEMETRY_TOO_LARGE
    )
    assert push(manager, T0 + 2, uuid, sid).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED


def test_subscription_id_then_compression_then_size_then_data() -> None:
    manager = new_manager(max_bytes=4, max_decompressed_bytes=4)
    uuid = get(manager, T0).client_instance_id
    sid = instance_of(manager, uuid).subscription_id
    now = itertools.count(T0 + 1_000_000, 300_000)

    def code(**kwargs: object) -> ErrorCode:
        return push(manager, next(now), uuid, **kwargs).error_code  # type: ignore[arg-type]

    assert code(subscription_id=sid + 1, compression=99, metrics=b"xxxxx") == (
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    )
    assert code(subscription_id=sid, compression=99, metrics=b"xxxxx") == (
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    )
    assert code(subscription_id=sid, compression=1, metrics=b"xxxxx") == (
        ErrorCode.TELEMETRY_TOO_LARGE
    )
    assert code(subscription_id=sid, compression=1, metrics=b"xxxx") == ErrorCode.INVALID_RECORD
    assert code(subscription_id=sid, compression=0, metrics=b"xxxx") == ErrorCode.NONE


def test_terminating_push_still_fails_later_checks() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    push(manager, T0, uuid, sid)
    refused = push(manager, T0 + 1, uuid, sid, terminating=True, compression=9)
    assert refused.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


# --- Kafka's "concurrent" cases, serialised (the manager runs on one event loop) ----


def test_two_gets_for_a_new_id_after_subscription_update_one_is_throttled() -> None:
    manager = new_manager()
    uuid = Uuid.random()
    assert get(manager, T0, uuid).error_code == ErrorCode.NONE
    manager.update_subscription("sub-1", DEFAULT_PROPERTIES)
    codes = sorted(get(manager, T0, uuid).error_code for _ in range(2))
    assert codes == [ErrorCode.NONE, ErrorCode.THROTTLING_QUOTA_EXCEEDED]


def test_two_pushes_after_subscription_update_117_and_89() -> None:
    manager = new_manager()
    first = get(manager, T0)
    manager.update_subscription("sub-1", DEFAULT_PROPERTIES)
    codes = sorted(
        push(manager, T0, first.client_instance_id, first.subscription_id).error_code
        for _ in range(2)
    )
    assert codes == [ErrorCode.THROTTLING_QUOTA_EXCEEDED, ErrorCode.UNKNOWN_SUBSCRIPTION_ID]


def test_two_pushes_on_a_new_server_none_and_89() -> None:
    first = get(new_manager(), T0)
    other = new_manager()
    codes = sorted(
        push(other, T0, first.client_instance_id, first.subscription_id).error_code
        for _ in range(2)
    )
    assert codes == [ErrorCode.NONE, ErrorCode.THROTTLING_QUOTA_EXCEEDED]


# --- instance lifecycle ------------------------------------------------------------


def test_stale_subscription_version_recreates_the_instance() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert push(manager, T0 + 1, uuid, sid).error_code == ErrorCode.NONE
    before = instance_of(manager, uuid)
    manager.update_subscription("sub-1", {"metrics": "*", "interval.ms": "1000"})
    # Fresh instance: timestamps 0, so the early push passes the gate, but
    # the subscription id changed, so it is 117, and the client re-GETs.
    assert push(manager, T0 + 2, uuid, sid).error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    after = instance_of(manager, uuid)
    assert after is not before
    assert after.metadata == before.metadata
    assert after.push_interval_ms == 1000
    second = get(manager, T0 + 3, uuid)
    assert second.error_code == ErrorCode.NONE
    assert second.subscription_id == after.subscription_id != sid


def test_recreated_instance_clears_terminating() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    push(manager, T0, uuid, sid, terminating=True)
    assert instance_of(manager, uuid).terminating
    manager.update_subscription("s", {"metrics": "a."})
    assert get(manager, T0 + 1, uuid).error_code == ErrorCode.NONE
    assert not instance_of(manager, uuid).terminating


def test_cache_expiry_at_three_intervals_to_the_ms() -> None:
    manager = new_manager(instance_cache_expiry_ms=100)
    manager.update_subscription("s", {"metrics": "*", "interval.ms": "100"})
    uuid = get(manager, T0).client_instance_id
    assert manager.expiry_deadline_ms(uuid) == T0 + 300
    assert manager.expire(T0 + 299) == 0
    assert manager.client_instance(uuid) is not None
    assert manager.expire(T0 + 300) == 1
    assert manager.client_instance(uuid) is None
    assert manager.stats.instances_expired == 1


def test_every_request_rearms_the_expiry() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert manager.expiry_deadline_ms(uuid) == T0 + 900_000  # max(60 s, 3 × 300 s)
    push(manager, T0 + 5, uuid, sid)
    assert manager.expiry_deadline_ms(uuid) == T0 + 900_005
    get(manager, T0 + 7, uuid)  # throttled, still re-arms (Kafka arms before validating)
    assert manager.expiry_deadline_ms(uuid) == T0 + 900_007


def test_expired_instance_is_recreated_on_the_next_request() -> None:
    manager = new_manager(instance_cache_expiry_ms=100)
    manager.update_subscription("s", {"metrics": "*", "interval.ms": "100"})
    first = get(manager, T0)
    uuid = first.client_instance_id
    assert push(manager, T0 + 300, uuid, first.subscription_id).error_code == ErrorCode.NONE
    assert manager.stats.instances_created == 2


def test_lru_eviction_by_size() -> None:
    manager = new_manager(instance_cache_size=2)
    ids = [get(manager, T0).client_instance_id for _ in range(3)]
    assert manager.instance_count == 2
    assert manager.client_instance(ids[0]) is None
    assert manager.stats.instances_evicted == 1


def test_disconnect_drops_the_instance_kafka_17778() -> None:
    manager = new_manager()
    uuid = get(manager, T0).client_instance_id
    other = get(manager, T0, ctx=replace(CTX, connection_id="2")).client_instance_id
    manager.on_disconnect("unknown")
    assert manager.instance_count == 2
    manager.on_disconnect("1")
    assert manager.client_instance(uuid) is None
    assert manager.client_instance(other) is not None
    assert manager.stats.instances_disconnected == 1


def test_stats_count_responses_by_code() -> None:
    manager = new_manager()
    first = get(manager, T0)
    get(manager, T0, first.client_instance_id)
    push(manager, T0, first.client_instance_id, first.subscription_id)
    push(manager, T0, first.client_instance_id, first.subscription_id)
    assert manager.stats.get_responses == {
        ErrorCode.NONE: 1,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED: 1,
    }
    assert manager.stats.push_responses == {
        ErrorCode.NONE: 1,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED: 1,
    }
    assert manager.stats.throttled == 2
    assert manager.stats.instances_created == 1


# --- config ----------------------------------------------------------------------


def test_config_defaults() -> None:
    config = TelemetryConfig()
    assert config.max_bytes == 1_048_576
    assert config.max_decompressed_bytes == 16 * 1_048_576
    assert config.instance_cache_size == 16_384
    assert config.instance_cache_expiry_ms == 60_000


@pytest.mark.parametrize(
    ("overrides", "key", "value"),
    [
        ({"max_bytes": 0}, "telemetry.max_bytes", 0),
        ({"max_bytes": 2**31}, "telemetry.max_bytes", 2**31),
        ({"max_bytes": True}, "telemetry.max_bytes", True),
        ({"max_decompressed_bytes": 10}, "telemetry.max_decompressed_bytes", 10),
        ({"instance_cache_size": 0}, "telemetry.instance_cache_size", 0),
        ({"instance_cache_expiry_ms": -5}, "telemetry.instance_cache_expiry_ms", -5),
        ({"instance_cache_expiry_ms": "60000"}, "telemetry.instance_cache_expiry_ms", "60000"),
    ],
)
def test_config_errors_name_key_and_value(
    overrides: dict[str, object], key: str, value: object
) -> None:
    with pytest.raises(ConfigError) as info:
        TelemetryConfig(**overrides)  # type: ignore[arg-type]
    assert info.value.key == key
    assert info.value.value == value
    assert key in str(info.value)
    assert repr(value) in str(info.value)
    assert info.value.error_code == ErrorCode.INVALID_CONFIG


# --- terminating pushes: bounded now that a failed one does not lock (KAFKA-20898) ---------


def gzip_bomb(size: int) -> bytes:
    return gzip.compress(bytes(size), compresslevel=9)


def test_failing_terminating_pushes_cost_one_decompression_per_interval() -> None:
    manager = new_manager(max_bytes=10_000, max_decompressed_bytes=100_000)
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    bomb = gzip_bomb(200_000)  # decompresses past the bound: 118, never locks
    codes = [
        push(manager, T0 + n, uuid, sid, terminating=True, compression=1, metrics=bomb).error_code
        for n in range(50)
    ]
    assert codes[0] == ErrorCode.TELEMETRY_TOO_LARGE
    assert set(codes[1:]) == {ErrorCode.THROTTLING_QUOTA_EXCEEDED}
    assert manager.stats.decompressions == 1
    # A GET within the interval is not exempt after 89 (nor after 118).
    assert get(manager, T0 + 100, uuid).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    # One interval later, one more.
    later = T0 + instance_of(manager, uuid).push_interval_ms
    again = [
        push(manager, later + n, uuid, sid, terminating=True, compression=1, metrics=bomb)
        for n in range(5)
    ]
    assert [r.error_code for r in again] == [ErrorCode.TELEMETRY_TOO_LARGE] + 4 * [
        ErrorCode.THROTTLING_QUOTA_EXCEEDED
    ]
    assert manager.stats.decompressions == 2


def test_terminating_push_right_after_a_regular_push_is_still_accepted() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert push(manager, T0 + 10, uuid, sid).error_code == ErrorCode.NONE
    assert push(manager, T0 + 20, uuid, sid, terminating=True).error_code == ErrorCode.NONE
    assert instance_of(manager, uuid).terminating


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        ({"subscription_delta": 1}, ErrorCode.UNKNOWN_SUBSCRIPTION_ID),
        ({"compression": 9}, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    ],
    ids=["117", "76"],
)
def test_terminating_retry_after_117_or_76_lands(bad: dict[str, int], code: ErrorCode) -> None:
    """The client re-GETs at once (exempt) and retries; that retry passes the gate."""
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert push(manager, T0 + 10, uuid, sid).error_code == ErrorCode.NONE
    refused = push(
        manager,
        T0 + 20,
        uuid,
        sid + bad.get("subscription_delta", 0),
        terminating=True,
        compression=bad.get("compression", 0),
    )
    assert refused.error_code == code
    # Without the GET, a second terminating push in the interval is refused...
    assert push(manager, T0 + 25, uuid, sid, terminating=True).error_code == (
        ErrorCode.THROTTLING_QUOTA_EXCEEDED
    )
    # ...but the refusal above was 89, so the GET is no longer exempt: redo the
    # client's real sequence (refusal, then GET at once) on a fresh instance.
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert push(manager, T0 + 10, uuid, sid).error_code == ErrorCode.NONE
    refused = push(
        manager,
        T0 + 20,
        uuid,
        sid + bad.get("subscription_delta", 0),
        terminating=True,
        compression=bad.get("compression", 0),
    )
    assert refused.error_code == code
    assert get(manager, T0 + 21, uuid).error_code == ErrorCode.NONE
    assert push(manager, T0 + 22, uuid, sid, terminating=True).error_code == ErrorCode.NONE
    assert instance_of(manager, uuid).terminating


def test_one_get_admits_one_terminating_push() -> None:
    manager = new_manager()
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    assert push(manager, T0 + 1, uuid, sid + 1, terminating=True).error_code == (
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    )
    assert get(manager, T0 + 2, uuid).error_code == ErrorCode.NONE  # exempt after 117
    assert push(manager, T0 + 3, uuid, sid + 1, terminating=True).error_code == (
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    )
    assert get(manager, T0 + 4, uuid).error_code == ErrorCode.NONE
    # Each GET admitted exactly one push; with no GET since, the next is refused.
    assert push(manager, T0 + 5, uuid, sid + 1, terminating=True).error_code == (
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    )
    assert push(manager, T0 + 6, uuid, sid, terminating=True).error_code == (
        ErrorCode.THROTTLING_QUOTA_EXCEEDED
    )


def test_decompression_comes_after_every_cheap_check() -> None:
    """A fresh instance's first push is gated like any other before anything is decompressed."""
    manager = new_manager(max_bytes=10_000, max_decompressed_bytes=100_000)
    bomb = gzip_bomb(200_000)
    first = get(manager, T0)
    uuid, sid = first.client_instance_id, first.subscription_id
    for kwargs in (
        {"subscription_id": sid + 1},
        {"compression_type": 9},
        {"metrics": bomb + bytes(10_000)},  # over max_bytes as sent
    ):
        fresh = get(manager, T0)
        arguments: dict[str, object] = {
            "client_instance_id": fresh.client_instance_id,
            "subscription_id": fresh.subscription_id,
            "terminating": True,
            "compression_type": 1,
            "metrics": bomb,
            "context": CTX,
            "now_ms": T0,
        }
        arguments.update(kwargs)
        refused = manager.validate_push(**arguments)  # type: ignore[arg-type]
        assert isinstance(refused, PushTelemetryResponse)
    assert manager.stats.decompressions == 0
    assert push(manager, T0, uuid, sid, compression=1, metrics=bomb).error_code == (
        ErrorCode.TELEMETRY_TOO_LARGE
    )
    assert manager.stats.decompressions == 1
