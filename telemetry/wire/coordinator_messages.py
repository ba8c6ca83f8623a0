"""FindCoordinator (key 10) v0–v6 and InitProducerId (key 22) v0–v5, following Kafka's schemas.

kip714 is no group or transaction coordinator, but Apache Kafka's Java
clients ask for one before their telemetry can run undisturbed: a classic
group consumer's ``poll`` throws ``UnsupportedVersionException`` while the
broker does not advertise FindCoordinator, and the idempotent producer (the
Java default since Kafka 3.0, KIP-679) enters its fatal error state without
InitProducerId. The answers are the minimum a Kafka broker gives: every
coordinator lookup fails with the retriable COORDINATOR_NOT_AVAILABLE, and a
non-transactional InitProducerId gets a fresh producer id at epoch 0, as
Kafka's ``TransactionCoordinator.handleInitProducerId`` gives one for a null
transactional id.

FindCoordinator is flexible from v3 and batched from v4 (KIP-699: one
``CoordinatorKeys`` array instead of ``Key``). InitProducerId is flexible
from v2 and carries the caller's ProducerId/ProducerEpoch from v3 (KIP-360);
v6 (KIP-939, two-phase commit) is left out, as Kafka 4.0 brokers leave it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self

from telemetry.errors import ErrorCode
from telemetry.wire.errors import MalformedFrameError

if TYPE_CHECKING:
    from telemetry.wire.primitives import Reader, Writer

FIND_COORDINATOR_FLEXIBLE_SINCE: Final = 3
#: KIP-699: from v4 a request names many keys and the response has one entry per key.
FIND_COORDINATOR_BATCHED_SINCE: Final = 4
INIT_PRODUCER_ID_FLEXIBLE_SINCE: Final = 2
#: KIP-360: from v3 the request carries the producer's current id and epoch.
INIT_PRODUCER_ID_EPOCH_SINCE: Final = 3
#: ``Errors.COORDINATOR_NOT_AVAILABLE.message()``, which Kafka puts in ErrorMessage.
COORDINATOR_NOT_AVAILABLE_MESSAGE: Final = "The coordinator is not available."
#: The most keys one batched lookup may name. Each key, one byte on the wire
#: when empty, costs an answer of about 50 bytes: without a bound an 8 MiB
#: frame would build a 400 MB response. Kafka's Java clients send one key
#: (a consumer, a producer) or one per group an admin call names.
MAX_COORDINATOR_KEYS: Final = 1000
#: ``Node.noNode()``: the id, host and port a failed lookup carries.
NO_NODE_ID: Final = -1
NO_NODE_PORT: Final = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinatorRequest:
    """``keys`` is ``Key`` (one) before v4 and ``CoordinatorKeys`` from v4.

    ``key_type`` is on the wire from v1 (0 group, 1 transaction, 2 share);
    v0 can only ask for a group coordinator.
    """

    keys: tuple[str, ...]
    key_type: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= FIND_COORDINATOR_FLEXIBLE_SINCE
        if version >= FIND_COORDINATOR_BATCHED_SINCE:
            key_type = reader.int8()
            count = reader.array_length(compact=True)
            if count > MAX_COORDINATOR_KEYS:
                raise MalformedFrameError(
                    f"FindCoordinator names {count} keys, more than {MAX_COORDINATOR_KEYS}"
                )
            # An empty array is valid (Kafka answers it with no entries).
            keys = tuple(reader.string(compact=True) for _ in range(count))
            reader.tagged_fields()
            return cls(keys=keys, key_type=key_type)
        key = reader.string(compact=flexible)
        key_type = reader.int8() if version >= 1 else 0
        if flexible:
            reader.tagged_fields()
        return cls(keys=(key,), key_type=key_type)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= FIND_COORDINATOR_FLEXIBLE_SINCE
        if version >= FIND_COORDINATOR_BATCHED_SINCE:
            writer.int8(self.key_type)
            writer.array_length(len(self.keys), compact=True)
            for key in self.keys:
                writer.string(key, compact=True)
            writer.tagged_fields()
            return
        if len(self.keys) != 1:
            raise ValueError(f"FindCoordinator v{version} names exactly one key")
        writer.string(self.keys[0], compact=flexible)
        if version >= 1:
            writer.int8(self.key_type)
        if flexible:
            writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class Coordinator:
    """One key's answer; before v4 the response's top level holds exactly one."""

    key: str = ""
    node_id: int = NO_NODE_ID
    host: str = ""
    port: int = NO_NODE_PORT
    error_code: int = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    error_message: str | None = COORDINATOR_NOT_AVAILABLE_MESSAGE


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinatorResponse:
    """Before v4 ``coordinators`` has one entry (its key is not on the wire);
    ``throttle_time_ms`` and ``error_message`` are on the wire from v1."""

    coordinators: tuple[Coordinator, ...]
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= FIND_COORDINATOR_FLEXIBLE_SINCE
        throttle_time_ms = reader.int32() if version >= 1 else 0
        if version >= FIND_COORDINATOR_BATCHED_SINCE:
            coordinators = tuple(reader.array(_read_coordinator, compact=True))
            reader.tagged_fields()
            return cls(coordinators=coordinators, throttle_time_ms=throttle_time_ms)
        error_code = reader.int16()
        error_message = reader.nullable_string(compact=flexible) if version >= 1 else None
        node_id = reader.int32()
        host = reader.string(compact=flexible)
        port = reader.int32()
        if flexible:
            reader.tagged_fields()
        only = Coordinator(
            node_id=node_id,
            host=host,
            port=port,
            error_code=error_code,
            error_message=error_message,
        )
        return cls(coordinators=(only,), throttle_time_ms=throttle_time_ms)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= FIND_COORDINATOR_FLEXIBLE_SINCE
        if version >= 1:
            writer.int32(self.throttle_time_ms)
        if version >= FIND_COORDINATOR_BATCHED_SINCE:
            writer.array_length(len(self.coordinators), compact=True)
            for coordinator in self.coordinators:
                writer.string(coordinator.key, compact=True)
                writer.int32(coordinator.node_id)
                writer.string(coordinator.host, compact=True)
                writer.int32(coordinator.port)
                writer.int16(coordinator.error_code)
                writer.nullable_string(coordinator.error_message, compact=True)
                writer.tagged_fields()
            writer.tagged_fields()
            return
        if len(self.coordinators) != 1:
            raise ValueError(f"FindCoordinator v{version} answers exactly one key")
        [only] = self.coordinators
        writer.int16(only.error_code)
        if version >= 1:
            writer.nullable_string(only.error_message, compact=flexible)
        writer.int32(only.node_id)
        writer.string(only.host, compact=flexible)
        writer.int32(only.port)
        if flexible:
            writer.tagged_fields()


def _read_coordinator(reader: Reader) -> Coordinator:
    coordinator = Coordinator(
        key=reader.string(compact=True),
        node_id=reader.int32(),
        host=reader.string(compact=True),
        port=reader.int32(),
        error_code=reader.int16(),
        error_message=reader.nullable_string(compact=True),
    )
    reader.tagged_fields()
    return coordinator


def coordinator_not_available(
    request: FindCoordinatorRequest, throttle_time_ms: int = 0
) -> FindCoordinatorResponse:
    """Kafka's ``FindCoordinatorRequest.getErrorResponse`` for COORDINATOR_NOT_AVAILABLE.

    Every key gets ``Node.noNode()``; the error is retriable, so a group
    consumer backs off and asks again while its telemetry carries on.
    """
    return FindCoordinatorResponse(
        coordinators=tuple(Coordinator(key=key) for key in request.keys),
        throttle_time_ms=throttle_time_ms,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class InitProducerIdRequest:
    """``producer_id``/``producer_epoch`` are on the wire from v3 (default -1)."""

    transactional_id: str | None = None
    transaction_timeout_ms: int = 0
    producer_id: int = -1
    producer_epoch: int = -1

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= INIT_PRODUCER_ID_FLEXIBLE_SINCE
        transactional_id = reader.nullable_string(compact=flexible)
        transaction_timeout_ms = reader.int32()
        producer_id, producer_epoch = -1, -1
        if version >= INIT_PRODUCER_ID_EPOCH_SINCE:
            producer_id = reader.int64()
            producer_epoch = reader.int16()
        if flexible:
            reader.tagged_fields()
        return cls(
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= INIT_PRODUCER_ID_FLEXIBLE_SINCE
        writer.nullable_string(self.transactional_id, compact=flexible)
        writer.int32(self.transaction_timeout_ms)
        if version >= INIT_PRODUCER_ID_EPOCH_SINCE:
            writer.int64(self.producer_id)
            writer.int16(self.producer_epoch)
        if flexible:
            writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class InitProducerIdResponse:
    """Defaults are ``InitProducerIdResponseData``'s: producer id -1, epoch 0."""

    error_code: int = 0
    throttle_time_ms: int = 0
    producer_id: int = -1
    producer_epoch: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        throttle_time_ms = reader.int32()
        error_code = reader.int16()
        producer_id = reader.int64()
        producer_epoch = reader.int16()
        if version >= INIT_PRODUCER_ID_FLEXIBLE_SINCE:
            reader.tagged_fields()
        return cls(
            error_code=error_code,
            throttle_time_ms=throttle_time_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )

    def write(self, writer: Writer, version: int) -> None:
        writer.int32(self.throttle_time_ms)
        writer.int16(self.error_code)
        writer.int64(self.producer_id)
        writer.int16(self.producer_epoch)
        if version >= INIT_PRODUCER_ID_FLEXIBLE_SINCE:
            writer.tagged_fields()


def init_producer_id_response(
    request: InitProducerIdRequest, new_producer_id: int, throttle_time_ms: int = 0
) -> InitProducerIdResponse:
    """A fresh producer id at epoch 0 for an idempotent producer; none for a transactional one.

    With a null transactional id Kafka's ``TransactionCoordinator`` always
    hands out a new producer id at epoch 0, whatever id and epoch the request
    carries. A transactional id needs the transaction coordinator, which
    kip714 is not: COORDINATOR_NOT_AVAILABLE, as its FindCoordinator says.
    """
    if request.transactional_id is not None:
        return InitProducerIdResponse(
            error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), throttle_time_ms=throttle_time_ms
        )
    return InitProducerIdResponse(
        producer_id=new_producer_id, producer_epoch=0, throttle_time_ms=throttle_time_ms
    )
