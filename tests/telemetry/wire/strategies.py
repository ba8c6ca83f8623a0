"""Hypothesis strategies for every message at every version, limited to what that
version can carry, so that encode → decode must give back exactly the input."""

from __future__ import annotations

from typing import TypeVar
from uuid import UUID

from hypothesis import strategies as st

from telemetry.wire import (
    AUTHORIZED_OPERATIONS_OMITTED,
    ZERO_UUID,
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataTopic,
    PushTelemetryRequest,
    PushTelemetryResponse,
    Request,
    RequestHeader,
    Response,
)
from telemetry.wire.coordinator_messages import FIND_COORDINATOR_BATCHED_SINCE, Coordinator

T = TypeVar("T")

int8s = st.integers(min_value=-(2**7), max_value=2**7 - 1)
int16s = st.integers(min_value=-(2**15), max_value=2**15 - 1)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
texts = st.text(max_size=12)
uuids = st.builds(UUID, int=st.integers(min_value=0, max_value=2**128 - 1))


def tuples(elements: st.SearchStrategy[T], max_size: int = 3) -> st.SearchStrategy[tuple[T, ...]]:
    return st.lists(elements, max_size=max_size).map(tuple)


def headers(api_key: int, version: int) -> st.SearchStrategy[RequestHeader]:
    return st.builds(
        RequestHeader,
        api_key=st.just(api_key),
        api_version=st.just(version),
        correlation_id=int32s,
        client_id=st.none() | texts,
    )


def api_versions_requests(version: int) -> st.SearchStrategy[ApiVersionsRequest]:
    if version < 3:
        return st.just(ApiVersionsRequest())
    return st.builds(ApiVersionsRequest, client_software_name=texts, client_software_version=texts)


def api_versions_responses(version: int) -> st.SearchStrategy[ApiVersionsResponse]:
    entry = st.builds(ApiVersion, api_key=int16s, min_version=int16s, max_version=int16s)
    return st.builds(
        ApiVersionsResponse,
        error_code=int16s,
        api_keys=tuples(entry, max_size=5),
        throttle_time_ms=int32s if version >= 1 else st.just(0),
    )


def metadata_requests(version: int) -> st.SearchStrategy[MetadataRequest]:
    if version >= 10:
        topic = st.builds(MetadataRequestTopic, name=st.none() | texts, topic_id=uuids)
    else:
        topic = st.builds(MetadataRequestTopic, name=texts, topic_id=st.just(ZERO_UUID))
    if version == 0:  # an empty v0 array means "all topics", i.e. None
        topics = st.none() | st.lists(topic, min_size=1, max_size=3).map(tuple)
    else:
        topics = st.none() | tuples(topic)
    return st.builds(
        MetadataRequest,
        topics=topics,
        allow_auto_topic_creation=st.booleans() if version >= 4 else st.just(True),
        include_cluster_authorized_operations=(
            st.booleans() if 8 <= version <= 10 else st.just(False)
        ),
        include_topic_authorized_operations=st.booleans() if version >= 8 else st.just(False),
    )


def metadata_responses(version: int) -> st.SearchStrategy[MetadataResponse]:
    broker = st.builds(
        MetadataBroker,
        node_id=int32s,
        host=texts,
        port=int32s,
        rack=(st.none() | texts) if version >= 1 else st.none(),
    )
    partition = st.builds(
        MetadataPartition,
        error_code=int16s,
        partition_index=int32s,
        leader_id=int32s,
        leader_epoch=int32s if version >= 7 else st.just(-1),
        replica_nodes=tuples(int32s),
        isr_nodes=tuples(int32s),
        offline_replicas=tuples(int32s) if version >= 5 else st.just(()),
    )
    topic = st.builds(
        MetadataTopic,
        error_code=int16s,
        name=(st.none() | texts) if version >= 12 else texts,
        topic_id=uuids if version >= 10 else st.just(ZERO_UUID),
        is_internal=st.booleans() if version >= 1 else st.just(False),
        partitions=tuples(partition, max_size=2),
        topic_authorized_operations=int32s
        if version >= 8
        else st.just(AUTHORIZED_OPERATIONS_OMITTED),
    )
    return st.builds(
        MetadataResponse,
        brokers=tuples(broker),
        topics=tuples(topic),
        cluster_id=(st.none() | texts) if version >= 2 else st.none(),
        controller_id=int32s if version >= 1 else st.just(-1),
        throttle_time_ms=int32s if version >= 3 else st.just(0),
        cluster_authorized_operations=(
            int32s if 8 <= version <= 10 else st.just(AUTHORIZED_OPERATIONS_OMITTED)
        ),
    )


def get_telemetry_subscriptions_requests() -> st.SearchStrategy[GetTelemetrySubscriptionsRequest]:
    return st.builds(GetTelemetrySubscriptionsRequest, client_instance_id=uuids)


def get_telemetry_subscriptions_responses() -> st.SearchStrategy[GetTelemetrySubscriptionsResponse]:
    return st.builds(
        GetTelemetrySubscriptionsResponse,
        error_code=int16s,
        throttle_time_ms=int32s,
        client_instance_id=uuids,
        subscription_id=int32s,
        accepted_compression_types=tuples(int8s, max_size=5),
        push_interval_ms=int32s,
        telemetry_max_bytes=int32s,
        delta_temporality=st.booleans(),
        requested_metrics=tuples(texts),
    )


def push_telemetry_requests() -> st.SearchStrategy[PushTelemetryRequest]:
    def build(
        instance: UUID, subscription: int, terminating: bool, codec: int, metrics: bytes | None
    ) -> PushTelemetryRequest:
        return PushTelemetryRequest(
            client_instance_id=instance,
            subscription_id=subscription,
            terminating=terminating,
            compression_type=codec,
            metrics=metrics or b"",
            metrics_was_null=metrics is None,
        )

    return st.builds(
        build, uuids, int32s, st.booleans(), int8s, st.none() | st.binary(max_size=300)
    )


def push_telemetry_responses() -> st.SearchStrategy[PushTelemetryResponse]:
    return st.builds(PushTelemetryResponse, error_code=int16s, throttle_time_ms=int32s)


def find_coordinator_requests(version: int) -> st.SearchStrategy[FindCoordinatorRequest]:
    if version >= FIND_COORDINATOR_BATCHED_SINCE:
        return st.builds(FindCoordinatorRequest, keys=tuples(texts), key_type=int8s)
    key_types = int8s if version >= 1 else st.just(0)
    return st.builds(FindCoordinatorRequest, keys=texts.map(lambda k: (k,)), key_type=key_types)


def find_coordinator_responses(version: int) -> st.SearchStrategy[FindCoordinatorResponse]:
    throttles = int32s if version >= 1 else st.just(0)
    if version >= FIND_COORDINATOR_BATCHED_SINCE:
        coordinator = st.builds(
            Coordinator,
            key=texts,
            node_id=int32s,
            host=texts,
            port=int32s,
            error_code=int16s,
            error_message=st.none() | texts,
        )
        return st.builds(
            FindCoordinatorResponse, coordinators=tuples(coordinator), throttle_time_ms=throttles
        )
    # Before v4 the one answer's key is not on the wire, nor (v0) its message.
    only = st.builds(
        Coordinator,
        key=st.just(""),
        node_id=int32s,
        host=texts,
        port=int32s,
        error_code=int16s,
        error_message=(st.none() | texts) if version >= 1 else st.none(),
    )
    return st.builds(
        FindCoordinatorResponse,
        coordinators=only.map(lambda c: (c,)),
        throttle_time_ms=throttles,
    )


def init_producer_id_requests(version: int) -> st.SearchStrategy[InitProducerIdRequest]:
    with_epoch = version >= 3
    return st.builds(
        InitProducerIdRequest,
        transactional_id=st.none() | texts,
        transaction_timeout_ms=int32s,
        producer_id=int64s if with_epoch else st.just(-1),
        producer_epoch=int16s if with_epoch else st.just(-1),
    )


def init_producer_id_responses() -> st.SearchStrategy[InitProducerIdResponse]:
    return st.builds(
        InitProducerIdResponse,
        error_code=int16s,
        throttle_time_ms=int32s,
        producer_id=int64s,
        producer_epoch=int16s,
    )


def requests(api_key: int, version: int) -> st.SearchStrategy[Request]:
    match api_key:
        case 10:
            return find_coordinator_requests(version)
        case 22:
            return init_producer_id_requests(version)
        case 18:
            return api_versions_requests(version)
        case 3:
            return metadata_requests(version)
        case 71:
            return get_telemetry_subscriptions_requests()
        case _:
            return push_telemetry_requests()


def responses(api_key: int, version: int) -> st.SearchStrategy[Response]:
    match api_key:
        case 10:
            return find_coordinator_responses(version)
        case 22:
            return init_producer_id_responses()
        case 18:
            return api_versions_responses(version)
        case 3:
            return metadata_responses(version)
        case 71:
            return get_telemetry_subscriptions_responses()
        case _:
            return push_telemetry_responses()


ALL_VERSIONS: list[tuple[int, int]] = [
    *((18, v) for v in range(5)),
    *((3, v) for v in range(13)),
    (71, 0),
    (72, 0),
    *((10, v) for v in range(7)),
    *((22, v) for v in range(6)),
]
"""Every (api key, version) kip714 supports."""
