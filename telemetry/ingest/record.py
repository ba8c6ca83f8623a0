"""The on-disk record format of the ingest log (format version 3; versions 1 and 2 are still read).

A segment file is a sequence of frames and nothing else, so recovery and
readers need no side index to find record boundaries::

    frame := length:u32le  crc:u32le  body[length]
    body  := version:u8 (=3)  flags:u8  offset:i64  subscription_id:i64
             received_time_ms:i64  push_interval_ms:i64  source_port:i32
             compression:u8  decompressed_size:u32  broker_id:i32
             8 × string_length:u32            (0xFFFFFFFF = None)
             the 8 strings' UTF-8 bytes       (in ``encode_frame``'s order)
             payload                          (the rest of the body, as the client sent it)

Version 3 adds the Kafka broker a push was forwarded through (the forward
route): ``broker_id`` (valid when flag 0x04 is set) and the eighth string,
its listener. A reader adds both to every resource of the payload it
returns, as the resource attributes ``kafka.broker.id`` and
``kafka.broker.listener`` (:func:`with_broker_attributes`), so every exporter
lands them; the route logs the payload as the broker sent it.
Version 2 has neither; version 1 bodies have no ``compression`` and
``decompressed_size`` either and hold the payload decompressed. Version 2
keeps the payload compressed, as sent
(``compression`` is Kafka's ``CompressionType`` id), because copying the
decompressed payload into the page cache was the log writer's largest cost
(a librdkafka push is ~0.9 KB as sent, ~8.9 KB decompressed).
``decode_body`` decompresses it, so readers still get the decompressed
payload; it produces at most ``decompressed_size`` bytes, which itself may
not exceed ``MAX_BODY``, the limit the writer enforced, so a damaged or
hostile record cannot make a reader allocate more.

``crc`` is CRC32C (Castagnoli, as Kafka's record batches use) over the whole
body as stored, so a torn write, a zero-filled tail and a flipped bit are
all caught before a record is served. The record's own offset is stored in
the body, so a frame that is intact but in the wrong place (a bug, or a file
restored from elsewhere) is caught too. ``version`` lets formats coexist in
the same directory: readers dispatch on it, writers always write the newest.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Final

import crc32c

from exporters.api import LoggedPush
from telemetry.core.codecs import CompressionType, decompress
from telemetry.errors import TelemetryError

FORMAT_VERSION = 3
HEADER = struct.Struct("<II")
_FIXED_V1 = struct.Struct("<BBqqqqi7I")
_FIXED_V2 = struct.Struct("<BBqqqqiBI7I")
_FIXED = struct.Struct("<BBqqqqiBIi8I")
MIN_BODY = _FIXED_V1.size
# A format limit, not a policy: recovery must judge frames written under any
# configuration by the same rule, so this never depends on ``LogConfig``.
# It bounds a body as stored and, in version 2, the decompressed size too.
MAX_BODY = 256 * 1024 * 1024
_NONE = 0xFFFFFFFF
_TERMINATING = 0x01
_HAS_PORT = 0x02
_HAS_BROKER_ID = 0x04
_OFFSET_AT = 2  # byte position of ``offset`` inside the body
_VERSIONS: Final = frozenset({1, 2, 3})
#: The codecs by their id: a dict lookup, not an enum call.
_CODECS: Final[dict[int, CompressionType]] = {int(c): c for c in CompressionType}
#: Above this decompressed size a reader thread lets the event loop take the
#: GIL between slices (``ingress.INLINE_DECOMPRESSED_BYTES``'s size).
_SHARE_GIL_BYTES: Final = 256 * 1024


class FrameError(Exception):
    """A frame that must not be served: torn, corrupt, or of an unknown version.

    ``position`` is the byte position of the frame's header in its segment
    file; recovery truncates there, readers report it.
    """

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"byte {position}: {reason}")
        self.position = position
        self.reason = reason


@dataclass(slots=True, kw_only=True, init=False)
class PushContext:
    """What the server knows about an accepted push before the log positions it.

    The same fields as ``exporters.api.LoggedPush`` minus ``offset`` and
    ``payload``: the offset is assigned by the log at append time, and the
    payload is passed alongside so it is never copied into another object.

    Not frozen, though nothing changes one once built: one is built per push,
    and a frozen dataclass's ``__init__`` (an ``object.__setattr__`` per
    field) cost more than the rest of its append. The ``__init__`` is written
    out, not generated, because the module is compiled and a generated one
    stays interpreted (``dataclasses.replace`` still works: it calls this one).
    """

    client_instance_id: str
    subscription_id: int
    received_time_ms: int
    push_interval_ms: int
    terminating: bool = False
    content_type: str = "OTLP"
    client_id: str | None = None
    client_software_name: str | None = None
    client_software_version: str | None = None
    client_source_address: str | None = None
    client_source_port: int | None = None
    principal: str | None = None
    #: The Kafka broker a forwarded push came through (``None``: not forwarded).
    broker_id: int | None = None
    broker_listener: str | None = None

    def __init__(
        self,
        *,
        client_instance_id: str,
        subscription_id: int,
        received_time_ms: int,
        push_interval_ms: int,
        terminating: bool = False,
        content_type: str = "OTLP",
        client_id: str | None = None,
        client_software_name: str | None = None,
        client_software_version: str | None = None,
        client_source_address: str | None = None,
        client_source_port: int | None = None,
        principal: str | None = None,
        broker_id: int | None = None,
        broker_listener: str | None = None,
    ) -> None:
        self.client_instance_id = client_instance_id
        self.subscription_id = subscription_id
        self.received_time_ms = received_time_ms
        self.push_interval_ms = push_interval_ms
        self.terminating = terminating
        self.content_type = content_type
        self.client_id = client_id
        self.client_software_name = client_software_name
        self.client_software_version = client_software_version
        self.client_source_address = client_source_address
        self.client_source_port = client_source_port
        self.principal = principal
        self.broker_id = broker_id
        self.broker_listener = broker_listener

    def __reduce__(self) -> tuple[object, tuple[tuple[object, ...]]]:
        """Copied and pickled through ``__init__``: a native class has no default way."""
        return _rebuild_push_context, (tuple(getattr(self, name) for name in _CONTEXT_FIELDS),)


_CONTEXT_FIELDS: Final = tuple(field.name for field in fields(PushContext))


def _rebuild_push_context(values: tuple[object, ...]) -> PushContext:
    return PushContext(**dict(zip(_CONTEXT_FIELDS, values, strict=True)))  # type: ignore[arg-type]


#: The eight strings of a push context, in the record's order.
_Strings = tuple[str, str, str | None, str | None, str | None, str | None, str | None, str | None]


class _EncodedStrings:
    """The strings' lengths and UTF-8 bytes, by their values: a client's pushes repeat them.

    Every push of an instance carries the same eight strings (its id, the
    content type, its connection's client id, software, address, principal
    and, forwarded, its broker's listener), so each set is encoded once.
    Bounded: the cache is emptied when it reaches ``max_entries``.
    """

    __slots__ = ("entries", "max_entries")

    def __init__(self, max_entries: int = 8192) -> None:
        self.max_entries = max_entries
        self.entries: dict[_Strings, tuple[tuple[int, ...], bytes]] = {}

    def get(self, strings: _Strings) -> tuple[tuple[int, ...], bytes]:
        entry = self.entries.get(strings)
        if entry is None:
            encoded = [None if value is None else value.encode("utf-8") for value in strings]
            entry = (
                tuple(_NONE if value is None else len(value) for value in encoded),
                b"".join(value for value in encoded if value),
            )
            if len(self.entries) >= self.max_entries:
                self.entries.clear()
            self.entries[strings] = entry
        return entry


_ENCODED_STRINGS = _EncodedStrings()


def encode_frame(
    offset: int,
    context: PushContext,
    payload: bytes,
    compression: int = 0,
    decompressed_size: int = -1,
) -> tuple[bytes, int]:
    """Encode everything of a frame but the payload.

    ``payload`` is stored as given, compressed with ``compression`` (a Kafka
    ``CompressionType`` id) into ``decompressed_size`` bytes, which the
    caller knows from checking it (-1: ``len(payload)``, for codec 0).
    Returns ``(head, frame_length)``: writing ``head`` then ``payload`` writes
    the frame. Keeping the payload out of ``head`` saves copying every payload
    once more before the group's vectored write.

    Raises:
        ValueError: A field does not fit the format (an integer out of range,
            an unknown codec, or a body or decompressed size over ``MAX_BODY``).
    """
    strings = (
        context.client_instance_id,
        context.content_type,
        context.client_id,
        context.client_software_name,
        context.client_software_version,
        context.client_source_address,
        context.principal,
        context.broker_listener,
    )
    # _EncodedStrings.get's hit, inlined: every push comes here.
    entry = _ENCODED_STRINGS.entries.get(strings)
    lengths, encoded = entry if entry is not None else _ENCODED_STRINGS.get(strings)
    flags = _TERMINATING if context.terminating else 0
    port = context.client_source_port
    if port is not None:
        flags |= _HAS_PORT
    broker_id = context.broker_id
    if broker_id is not None:
        flags |= _HAS_BROKER_ID
    if decompressed_size < 0:
        if compression:
            raise ValueError("a compressed payload needs its decompressed size")
        decompressed_size = len(payload)
    elif not compression and decompressed_size != len(payload):
        raise ValueError(
            f"an uncompressed payload of {len(payload)} bytes declared as {decompressed_size}"
        )
    if compression not in _CODECS:
        raise ValueError(f"unknown compression type {compression}")
    try:
        fixed = _FIXED.pack(
            FORMAT_VERSION,
            flags,
            offset,
            context.subscription_id,
            context.received_time_ms,
            context.push_interval_ms,
            0 if port is None else port,
            compression,
            decompressed_size,
            0 if broker_id is None else broker_id,
            *lengths,
        )
    except struct.error as exc:
        raise ValueError(f"push context does not fit the log format: {exc}") from exc
    meta = fixed + encoded
    body_length = len(meta) + len(payload)
    if body_length > MAX_BODY or decompressed_size > MAX_BODY:
        raise ValueError(
            f"record body of {body_length} bytes ({decompressed_size} decompressed)"
            f" exceeds {MAX_BODY}"
        )
    crc = crc32c.crc32c(payload, value=crc32c.crc32c(meta))
    return HEADER.pack(body_length, crc) + meta, HEADER.size + body_length


def check_body(buf: bytes, start: int, end: int, crc: int, expected_offset: int) -> None:
    """Verify a body without decoding it, for recovery's full scan.

    Raises:
        FrameError: The checksum, version or offset is wrong.
    """
    body = memoryview(buf)[start:end]
    if crc32c.crc32c(body) != crc:
        raise FrameError(start - HEADER.size, "CRC32C mismatch")
    if buf[start] not in _VERSIONS:
        raise FrameError(start - HEADER.size, f"unknown record format version {buf[start]}")
    (offset,) = struct.unpack_from("<q", buf, start + _OFFSET_AT)
    if offset != expected_offset:
        raise FrameError(
            start - HEADER.size, f"record holds offset {offset}, expected {expected_offset}"
        )


def decoded_size(buf: bytes, start: int, end: int) -> int:
    """How many bytes the body ``buf[start:end]`` holds once decoded (its payload decompressed).

    For a reader's byte budget, before decompressing: a version 2 body is
    smaller on disk than in memory. Call it on a body ``check_body`` passed
    (a damaged one could claim any size).
    """
    version = buf[start]
    if version == 1:
        return end - start
    fixed = _FIXED_V2 if version == 2 else _FIXED
    if end - start < fixed.size:
        return end - start
    fields: tuple[int, ...] = fixed.unpack_from(buf, start)
    size = fields[8]
    lengths = fields[9:] if version == 2 else fields[10:]
    return fixed.size + sum(length for length in lengths if length != _NONE) + size


def decode_body(buf: bytes, start: int, end: int, crc: int, expected_offset: int) -> LoggedPush:
    """Verify and decode the body ``buf[start:end]`` of a frame, in either format version.

    The payload comes back decompressed, whatever the version.

    Raises:
        FrameError: The body fails its checksum, has an unknown version, holds
            another offset than ``expected_offset``, its lengths are
            inconsistent, or its payload does not decompress to its
            declared size.
    """
    check_body(buf, start, end, crc, expected_offset)
    return decode_checked_body(buf, start, end)


def decode_checked_body(buf: bytes, start: int, end: int) -> LoggedPush:
    """:func:`decode_body` of a body ``check_body`` has passed.

    Raises:
        FrameError: As :func:`decode_body`, but for the checks already made.
    """
    at = start - HEADER.size
    fields: tuple[int, ...]
    version = buf[start]
    broker_id = 0
    if version == 1:
        fields = _FIXED_V1.unpack_from(buf, start)
        pos = start + _FIXED_V1.size
        compression, size, lengths = 0, -1, (*fields[7:], _NONE)  # no listener
    else:
        fixed = _FIXED_V2 if version == 2 else _FIXED
        if end - start < fixed.size:
            raise FrameError(at, f"record body of {end - start} bytes is too short")
        fields = fixed.unpack_from(buf, start)
        pos = start + fixed.size
        compression, size = fields[7], fields[8]
        if version == 2:
            lengths = (*fields[9:], _NONE)  # no listener
        else:
            broker_id, lengths = fields[9], fields[10:]
    _version, flags, offset, subscription_id, received_time_ms, push_interval_ms, port = fields[:7]
    values: list[str | None] = []
    for length in lengths:
        if length == _NONE:
            values.append(None)
            continue
        if pos + length > end:
            raise FrameError(at, "string length past end of record")
        try:
            values.append(buf[pos : pos + length].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise FrameError(at, f"invalid UTF-8: {exc.reason}") from exc
        pos += length
    instance_id, content_type, client_id, sw_name, sw_version, address, principal, listener = values
    if instance_id is None or content_type is None:
        raise FrameError(at, "required string missing")
    payload = buf[pos:end]
    # Version 1 stored the payload decompressed: its size as sent is unknown.
    received_bytes: int | None = None if size < 0 else end - pos
    if size >= 0:
        payload = _decompressed(at, compression, payload, size)
    decoded_bytes = len(payload)
    broker: int | None = broker_id if flags & _HAS_BROKER_ID else None
    if broker is not None or listener is not None:
        payload = with_broker_attributes(payload, broker, listener)
    return LoggedPush(
        offset=offset,
        client_instance_id=instance_id,
        subscription_id=subscription_id,
        client_id=client_id,
        client_software_name=sw_name,
        client_software_version=sw_version,
        client_source_address=address,
        client_source_port=port if flags & _HAS_PORT else None,
        principal=principal,
        received_time_ms=received_time_ms,
        push_interval_ms=push_interval_ms,
        terminating=bool(flags & _TERMINATING),
        content_type=content_type,
        payload=payload,
        broker_id=broker,
        broker_listener=listener,
        received_bytes=received_bytes,
        decoded_bytes=decoded_bytes,
    )


def _decompressed(at: int, compression: int, stored: bytes, size: int) -> bytes:
    """A version 2 payload decompressed: exactly ``size`` bytes, producing no more than that.

    The push path checked this payload decompresses within its limits before
    logging it, so any failure here is damage the CRC could not see (or a
    record written by something else): a ``FrameError``, never a crash.
    """
    codec = _CODECS.get(compression)
    if codec is None:
        raise FrameError(at, f"unknown compression type {compression}")
    if size > MAX_BODY:
        raise FrameError(at, f"record declares {size} decompressed bytes, over {MAX_BODY}")
    try:
        payload = decompress(codec, stored, size, share_gil=size > _SHARE_GIL_BYTES)
    except TelemetryError as exc:
        raise FrameError(at, f"{codec.name} payload does not decompress: {exc}") from exc
    if len(payload) != size:
        raise FrameError(
            at, f"{codec.name} payload decompressed to {len(payload)} bytes, record declares {size}"
        )
    return payload


#: The resource attributes naming the broker a forwarded push came through.
BROKER_ID_ATTRIBUTE: Final = "kafka.broker.id"
BROKER_LISTENER_ATTRIBUTE: Final = "kafka.broker.listener"


def with_broker_attributes(payload: bytes, broker_id: int | None, listener: str | None) -> bytes:
    """``payload`` (OTLP ``MetricsData``) with the broker's attributes on every resource.

    At the wire level, not through a parse: each top-level ``ResourceMetrics``
    gets one more ``resource`` field appended, holding only the attributes,
    which protobuf merges into its resource (a message field sent twice is
    merged, a repeated one concatenated). They come after whatever the client
    sent, so they win over attributes it sent under the same names (the
    landing keeps the last of repeated keys). The cost is one pass over the
    top-level fields, not over the data points. A payload whose top level
    is not well-formed protobuf comes back unchanged (the landing skips it as
    undecodable).
    """
    extra = b""
    if broker_id is not None:
        value = b"\x18" + _varint(broker_id & 0xFFFFFFFFFFFFFFFF)  # AnyValue.int_value
        extra += _field(1, _field(1, BROKER_ID_ATTRIBUTE.encode()) + _field(2, value))
    if listener is not None:
        value = _field(1, listener.encode("utf-8"))  # AnyValue.string_value
        extra += _field(1, _field(1, BROKER_LISTENER_ATTRIBUTE.encode()) + _field(2, value))
    if not extra:
        return payload
    resource = _field(1, extra)  # ResourceMetrics.resource := Resource{attributes}
    parts: list[bytes] = []
    pos, end = 0, len(payload)
    while pos < end:
        field_at = pos
        tag, body_at, pos = _next_field(payload, pos)
        if pos < 0 or pos > end:
            return payload
        if tag == 0x0A:  # MetricsData.resource_metrics
            body = payload[body_at:pos] + resource
            parts.append(b"\x0a" + _varint(len(body)) + body)
        else:
            parts.append(payload[field_at:pos])
    return b"".join(parts)


def _next_field(buf: bytes, pos: int) -> tuple[int, int, int]:
    """The field at ``pos``: its tag, where its value starts, and where it ends (-1: malformed)."""
    tag, pos = _read_varint(buf, pos)
    if pos < 0:
        return 0, -1, -1
    wire = tag & 7
    if wire == 0:
        _, end = _read_varint(buf, pos)
        return tag, pos, end
    if wire == 1:
        return tag, pos, pos + 8
    if wire == 5:
        return tag, pos, pos + 4
    if wire == 2:
        length, at = _read_varint(buf, pos)
        return tag, at, -1 if at < 0 else at + length
    return tag, -1, -1


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, body: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it (-1: cut short or too long)."""
    result = 0
    shift = 0
    end = len(buf)
    while pos < end and shift < 64:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    return 0, -1
