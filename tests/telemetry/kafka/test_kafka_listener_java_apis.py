"""FindCoordinator and InitProducerId on the real listener, as Kafka's Java clients send them.

The end-to-end run with the Java clients themselves is ``tests/javaclient/``;
here every served version is driven over loopback with the repo's wire client.
"""

from __future__ import annotations

import struct
import tracemalloc
from typing import TYPE_CHECKING

from telemetry.errors import ErrorCode
from telemetry.wire import (
    SUPPORTED_VERSIONS,
    ApiKey,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from telemetry.wire.coordinator_messages import (
    COORDINATOR_NOT_AVAILABLE_MESSAGE,
    MAX_COORDINATOR_KEYS,
)
from telemetry.wire.metadata import MAX_METADATA_TOPICS, MetadataResponse
from telemetry.wire.primitives import Writer
from tests.telemetry.kafka_wire_client import raw_header, running_server, serves_telemetry, sized

if TYPE_CHECKING:
    from pathlib import Path

FIND = ApiKey.FIND_COORDINATOR
INIT = ApiKey.INIT_PRODUCER_ID


async def test_every_coordinator_lookup_is_retriable_and_the_connection_stays(
    tmp_path: Path,
) -> None:
    async with running_server(tmp_path) as server:
        client = await server.connect("java-group-consumer")
        await client.api_versions()
        for version in range(SUPPORTED_VERSIONS[FIND].max_version + 1):
            keys = ("group-a", "txn-b") if version >= 4 else ("group-a",)
            key_type = 1 if version >= 1 else 0
            request = FindCoordinatorRequest(keys=keys, key_type=key_type)
            answer = await client.call(FIND, version, request, FindCoordinatorResponse)
            assert [c.error_code for c in answer.coordinators] == [
                ErrorCode.COORDINATOR_NOT_AVAILABLE
            ] * len(keys)
            for coordinator in answer.coordinators:
                assert (coordinator.node_id, coordinator.host, coordinator.port) == (-1, "", -1)
                if version >= 1:
                    assert coordinator.error_message == COORDINATOR_NOT_AVAILABLE_MESSAGE
            if version >= 4:
                assert tuple(c.key for c in answer.coordinators) == keys
        await client.close()
        # The same listener still serves telemetry, and closed nothing itself.
        assert await serves_telemetry(server)
        assert server.listener.stats.requests["FindCoordinator"] == 7
        assert set(server.listener.stats.closed_for) <= {"eof"}


async def test_each_idempotent_producer_gets_its_own_id_at_epoch_zero(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server:
        client = await server.connect("java-producer")
        ids = []
        for version in range(SUPPORTED_VERSIONS[INIT].max_version + 1):
            # From v3 a producer bumping its epoch names its current id and epoch (KIP-360);
            # without a transactional id Kafka hands out a new id all the same.
            request = InitProducerIdRequest(
                transaction_timeout_ms=60000,
                producer_id=7 if version >= 3 else -1,
                producer_epoch=2 if version >= 3 else -1,
            )
            answer = await client.call(INIT, version, request, InitProducerIdResponse)
            assert (answer.error_code, answer.producer_epoch) == (ErrorCode.NONE, 0)
            ids.append(answer.producer_id)
        transactional = InitProducerIdRequest(transactional_id="tx-1", transaction_timeout_ms=1)
        refused = await client.call(INIT, 5, transactional, InitProducerIdResponse)
        await client.close()

    assert ids == sorted(set(ids))
    assert ids[0] >= 0
    assert refused.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert refused.producer_id == -1


def batched_lookup(keys: int) -> bytes:
    """FindCoordinator v6 naming ``keys`` empty group ids: one byte each on the wire."""
    count = Writer()
    count.uvarint(keys + 1)
    body = b"\x00" + count.getvalue() + b"\x01" * keys + b"\x00"
    return sized(raw_header(10, 6, 1, tags=True) + body)


async def test_a_lookup_of_a_million_keys_costs_its_frame_not_a_million_answers(
    tmp_path: Path,
) -> None:
    """Answered, a 1 MB frame of empty keys would build a 50 MB response; it is refused instead."""
    async with running_server(tmp_path, max_frame_bytes=2 * 1024 * 1024) as server:
        at_bound = await server.connect("batched-admin")
        await at_bound.write(batched_lookup(MAX_COORDINATOR_KEYS))
        _, answer = await at_bound.receive(FIND, 6, FindCoordinatorResponse)
        await at_bound.close()
        assert len(answer.coordinators) == MAX_COORDINATOR_KEYS

        frame = batched_lookup(1_000_000)
        hostile = await server.connect("hostile")
        tracemalloc.start()
        try:
            await hostile.write(frame)
            closed = await hostile.closed_by_server()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await hostile.close()
        assert closed
        assert server.listener.stats.closed_for["malformed"] == 1
        assert await serves_telemetry(server)
    # The frame is read (and copied) whole; nothing is built per key.
    assert peak < 4 * len(frame)


def metadata_naming(topics: int) -> bytes:
    """Metadata v1 naming ``topics`` empty topic names: two bytes each on the wire."""
    body = struct.pack(">i", topics) + b"\x00\x00" * topics
    return sized(raw_header(3, 1, 1, tags=False) + body)


async def test_a_metadata_request_naming_too_many_topics_is_refused_unanswered(
    tmp_path: Path,
) -> None:
    """Every named topic gets an error entry several times its size, so their number is capped."""
    async with running_server(tmp_path, max_frame_bytes=2 * 1024 * 1024) as server:
        at_bound = await server.connect("many-topics")
        await at_bound.write(metadata_naming(MAX_METADATA_TOPICS))
        _, answer = await at_bound.receive(ApiKey.METADATA, 1, MetadataResponse)
        await at_bound.close()
        hostile = await server.connect("hostile")
        await hostile.write(metadata_naming(MAX_METADATA_TOPICS + 1))
        closed = await hostile.closed_by_server()
        await hostile.close()
        assert await serves_telemetry(server)
        malformed = server.listener.stats.closed_for["malformed"]

    assert len(answer.topics) == MAX_METADATA_TOPICS
    assert closed
    assert malformed == 1
