"""Metadata (key 3) v0–v12, following ``MetadataRequest.json`` / ``MetadataResponse.json``.

kip714 answers with itself as the only broker and no topics: Metadata exists
here only because clients push telemetry to a broker *learned* from Metadata,
never to the bootstrap connection, so the advertised
host and port must be the address the client can reach.

Version history that shapes the code (from the schemas):
v1 nullable request topics (null = all), Rack, ControllerId, IsInternal;
v2 ClusterId; v3 ThrottleTimeMs; v4 AllowAutoTopicCreation; v5 OfflineReplicas;
v7 LeaderEpoch; v8 authorized operations (cluster ones only v8–v10);
v9 first flexible version; v10 topic ids (request names nullable);
v12 response topic names nullable (topics looked up by id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self

from telemetry.errors import ErrorCode
from telemetry.wire.errors import MalformedFrameError
from telemetry.wire.primitives import ZERO_UUID, Reader, Writer

if TYPE_CHECKING:
    from uuid import UUID

_FLEXIBLE_SINCE: Final = 9

UNKNOWN_TOPIC_OR_PARTITION: Final = 3
"""``Errors.UNKNOWN_TOPIC_OR_PARTITION``: a topic asked for by name that kip714 does not have."""

#: Topics one Metadata request may name. kip714 answers each with an error
#: entry of 10+ bytes, so an 8 MiB frame of empty names would build a
#: response several times its size; no client asks for this many.
MAX_METADATA_TOPICS: Final = 10_000
UNKNOWN_TOPIC_ID: Final = 100
"""``Errors.UNKNOWN_TOPIC_ID``: a topic asked for by id only (v12+)."""

AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
"""The schemas' default for authorized-operation bitfields: "not requested"."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequestTopic:
    """A requested topic: by name, or (v12+) by id with a null name."""

    name: str | None
    topic_id: UUID = ZERO_UUID


def _read_request_topic(reader: Reader, version: int) -> MetadataRequestTopic:
    flexible = version >= _FLEXIBLE_SINCE
    if version >= 10:
        topic_id = reader.uuid()
        name = reader.nullable_string(flexible)
    else:
        topic_id = ZERO_UUID
        name = reader.string(flexible)
    if flexible:
        reader.tagged_fields()
    return MetadataRequestTopic(name=name, topic_id=topic_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequest:
    """``topics`` is None for "all topics" and empty for "brokers only".

    v0 has no null array and spells "all topics" as an empty array; decoding
    maps that to None so handlers never need the version to read the request.
    """

    topics: tuple[MetadataRequestTopic, ...] | None
    allow_auto_topic_creation: bool = True
    include_cluster_authorized_operations: bool = False
    include_topic_authorized_operations: bool = False

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= _FLEXIBLE_SINCE
        if version >= 1:
            count = reader.nullable_array_length(flexible)
        else:
            count = reader.array_length(flexible) or None
        if count is not None and count > MAX_METADATA_TOPICS:
            raise MalformedFrameError(
                f"Metadata names {count} topics, more than {MAX_METADATA_TOPICS}"
            )
        topics = (
            None
            if count is None
            else tuple(_read_request_topic(reader, version) for _ in range(count))
        )
        allow_auto_topic_creation = reader.boolean() if version >= 4 else True
        include_cluster = reader.boolean() if 8 <= version <= 10 else False
        include_topic = reader.boolean() if version >= 8 else False
        if flexible:
            reader.tagged_fields()
        return cls(
            topics=topics,
            allow_auto_topic_creation=allow_auto_topic_creation,
            include_cluster_authorized_operations=include_cluster,
            include_topic_authorized_operations=include_topic,
        )

    def write(self, writer: Writer, version: int) -> None:
        """Fields a version cannot carry are dropped, as Kafka drops ignorable ones;
        a request whose meaning would change (no topics at v0, a null name before
        v10) raises ``ValueError``."""
        flexible = version >= _FLEXIBLE_SINCE
        topics = self.topics
        if version == 0:
            if topics == ():
                raise ValueError("Metadata v0 cannot ask for no topics")
            writer.array_length(0 if topics is None else len(topics), flexible)
        else:
            writer.nullable_array_length(None if topics is None else len(topics), flexible)
        for topic in topics or ():
            if version >= 10:
                writer.uuid(topic.topic_id)
                writer.nullable_string(topic.name, flexible)
            elif topic.name is None:
                raise ValueError(f"Metadata v{version} cannot ask for a topic by id")
            else:
                writer.string(topic.name, flexible)
            if flexible:
                writer.tagged_fields()
        if version >= 4:
            writer.boolean(self.allow_auto_topic_creation)
        if 8 <= version <= 10:
            writer.boolean(self.include_cluster_authorized_operations)
        if version >= 8:
            writer.boolean(self.include_topic_authorized_operations)
        if flexible:
            writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataBroker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataPartition:
    """Present for completeness of the schema; kip714 itself never has partitions."""

    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int = -1
    replica_nodes: tuple[int, ...] = ()
    isr_nodes: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataTopic:
    error_code: int
    name: str | None
    topic_id: UUID = ZERO_UUID
    is_internal: bool = False
    partitions: tuple[MetadataPartition, ...] = ()
    topic_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponse:
    brokers: tuple[MetadataBroker, ...]
    topics: tuple[MetadataTopic, ...] = ()
    cluster_id: str | None = None
    controller_id: int = -1
    throttle_time_ms: int = 0
    cluster_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= _FLEXIBLE_SINCE
        throttle_time_ms = reader.int32() if version >= 3 else 0
        brokers = tuple(reader.array(lambda r: _read_broker(r, version), flexible))
        cluster_id = reader.nullable_string(flexible) if version >= 2 else None
        controller_id = reader.int32() if version >= 1 else -1
        topics = tuple(reader.array(lambda r: _read_topic(r, version), flexible))
        cluster_ops = reader.int32() if 8 <= version <= 10 else AUTHORIZED_OPERATIONS_OMITTED
        if flexible:
            reader.tagged_fields()
        return cls(
            brokers=brokers,
            topics=topics,
            cluster_id=cluster_id,
            controller_id=controller_id,
            throttle_time_ms=throttle_time_ms,
            cluster_authorized_operations=cluster_ops,
        )

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= _FLEXIBLE_SINCE
        if version >= 3:
            writer.int32(self.throttle_time_ms)
        writer.array_length(len(self.brokers), flexible)
        for broker in self.brokers:
            writer.int32(broker.node_id)
            writer.string(broker.host, flexible)
            writer.int32(broker.port)
            if version >= 1:
                writer.nullable_string(broker.rack, flexible)
            if flexible:
                writer.tagged_fields()
        if version >= 2:
            writer.nullable_string(self.cluster_id, flexible)
        if version >= 1:
            writer.int32(self.controller_id)
        writer.array_length(len(self.topics), flexible)
        for topic in self.topics:
            _write_topic(writer, topic, version)
        if 8 <= version <= 10:
            writer.int32(self.cluster_authorized_operations)
        if flexible:
            writer.tagged_fields()


def _read_broker(reader: Reader, version: int) -> MetadataBroker:
    flexible = version >= _FLEXIBLE_SINCE
    node_id = reader.int32()
    host = reader.string(flexible)
    port = reader.int32()
    rack = reader.nullable_string(flexible) if version >= 1 else None
    if flexible:
        reader.tagged_fields()
    return MetadataBroker(node_id=node_id, host=host, port=port, rack=rack)


def _read_partition(reader: Reader, version: int) -> MetadataPartition:
    flexible = version >= _FLEXIBLE_SINCE
    error_code = reader.int16()
    partition_index = reader.int32()
    leader_id = reader.int32()
    leader_epoch = reader.int32() if version >= 7 else -1
    replica_nodes = reader.int32_array(flexible)
    isr_nodes = reader.int32_array(flexible)
    offline_replicas = reader.int32_array(flexible) if version >= 5 else ()
    if flexible:
        reader.tagged_fields()
    return MetadataPartition(
        error_code=error_code,
        partition_index=partition_index,
        leader_id=leader_id,
        leader_epoch=leader_epoch,
        replica_nodes=replica_nodes,
        isr_nodes=isr_nodes,
        offline_replicas=offline_replicas,
    )


def _read_topic(reader: Reader, version: int) -> MetadataTopic:
    flexible = version >= _FLEXIBLE_SINCE
    error_code = reader.int16()
    name = reader.nullable_string(flexible) if version >= 12 else reader.string(flexible)
    topic_id = reader.uuid() if version >= 10 else ZERO_UUID
    is_internal = reader.boolean() if version >= 1 else False
    partitions = tuple(reader.array(lambda r: _read_partition(r, version), flexible))
    topic_ops = reader.int32() if version >= 8 else AUTHORIZED_OPERATIONS_OMITTED
    if flexible:
        reader.tagged_fields()
    return MetadataTopic(
        error_code=error_code,
        name=name,
        topic_id=topic_id,
        is_internal=is_internal,
        partitions=partitions,
        topic_authorized_operations=topic_ops,
    )


def _write_topic(writer: Writer, topic: MetadataTopic, version: int) -> None:
    flexible = version >= _FLEXIBLE_SINCE
    writer.int16(topic.error_code)
    if version >= 12:
        writer.nullable_string(topic.name, flexible)
    elif topic.name is None:
        raise ValueError(f"Metadata v{version} responses cannot carry a null topic name")
    else:
        writer.string(topic.name, flexible)
    if version >= 10:
        writer.uuid(topic.topic_id)
    if version >= 1:
        writer.boolean(topic.is_internal)
    writer.array_length(len(topic.partitions), flexible)
    for partition in topic.partitions:
        writer.int16(partition.error_code)
        writer.int32(partition.partition_index)
        writer.int32(partition.leader_id)
        if version >= 7:
            writer.int32(partition.leader_epoch)
        writer.int32_array(partition.replica_nodes, flexible)
        writer.int32_array(partition.isr_nodes, flexible)
        if version >= 5:
            writer.int32_array(partition.offline_replicas, flexible)
        if flexible:
            writer.tagged_fields()
    if version >= 8:
        writer.int32(topic.topic_authorized_operations)
    if flexible:
        writer.tagged_fields()


def _unknown_topic(topic: MetadataRequestTopic, version: int) -> MetadataTopic:
    if topic.name is not None:
        return MetadataTopic(
            error_code=UNKNOWN_TOPIC_OR_PARTITION, name=topic.name, topic_id=topic.topic_id
        )
    if version >= 12:
        return MetadataTopic(error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=topic.topic_id)
    # v10-v11 allow a null name on the wire but Kafka refuses to look topics up by
    # id before v12 ("Topic name can not be null for version ...").
    return MetadataTopic(
        error_code=int(ErrorCode.INVALID_REQUEST), name="", topic_id=topic.topic_id
    )


def build_metadata_response(
    request: MetadataRequest,
    version: int,
    *,
    node_id: int,
    host: str,
    port: int,
    cluster_id: str | None,
    rack: str | None = None,
    throttle_time_ms: int = 0,
) -> MetadataResponse:
    """kip714's answer: itself as the only broker and controller, and no topics.

    Each topic asked for is answered with an error and no partitions
    (UNKNOWN_TOPIC_OR_PARTITION by name, UNKNOWN_TOPIC_ID by id), which clients
    accept; "all topics" and "brokers only" get none.
    """
    topics = tuple(_unknown_topic(t, version) for t in request.topics or ())
    return MetadataResponse(
        brokers=(MetadataBroker(node_id=node_id, host=host, port=port, rack=rack),),
        topics=topics,
        cluster_id=cluster_id,
        controller_id=node_id,
        throttle_time_ms=throttle_time_ms,
    )
