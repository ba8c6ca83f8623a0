"""The forward route's body: a batch of pushes a Kafka broker accepted, in a binary framing.

Why a binary framing rather than JSON: a batch holds up to megabytes of OTLP
bytes, and base64 would cost the broker a third more to send and both sides
a pass over every byte; the framing is as simple as Kafka's own (see
``docs/plugin.md``)::

    request := version:int8(=1) broker_id:int32 count:int32 push[count]
    push    := client_instance_id:16 bytes  flags:int8 (0x01 terminating)
               push_interval_ms:int32 (-1 unknown)  received_time_ms:int64
               source_port:int32 (-1 unknown)
               7 × string  (client_id, software_name, software_version,
                            source_address, principal, listener, content_type)
               payload_length:int32  payload
    string  := length:int16 (-1 = null)  UTF-8 bytes

All integers are big-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from telemetry.core.client_uuid import Uuid

__all__ = [
    "CONTENT_TYPE",
    "ForwardFormatError",
    "ForwardRequest",
    "ForwardedPush",
    "decode_forward_request",
]

CONTENT_TYPE: Final = "application/x-kip714-forward"
FORMAT_VERSION: Final = 1
_TERMINATING: Final = 0x01
_HEAD: Final = struct.Struct(">bii")
_PUSH_FIXED: Final = struct.Struct(">16sbiqi")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
#: The fewest bytes one push takes (no strings, empty payload): bounds ``count``.
_MIN_PUSH: Final = _PUSH_FIXED.size + 7 * _INT16.size + _INT32.size


class ForwardFormatError(ValueError):
    """The body is not a forward request of a known version."""


@dataclass(frozen=True, slots=True)
class ForwardedPush:
    client_instance_id: str
    terminating: bool
    push_interval_ms: int | None
    received_time_ms: int
    client_source_port: int | None
    client_id: str | None
    client_software_name: str | None
    client_software_version: str | None
    client_source_address: str | None
    principal: str | None
    listener: str | None
    content_type: str | None
    payload: bytes


@dataclass(frozen=True, slots=True)
class ForwardRequest:
    broker_id: int | None
    pushes: list[ForwardedPush]


def decode_forward_request(body: bytes) -> ForwardRequest:
    """Parse a whole request; every length is checked against what is left of ``body``.

    Raises:
        ForwardFormatError: Unknown version, truncated or trailing bytes, bad UTF-8.
    """
    view = memoryview(body)
    try:
        version, broker_id, count = _HEAD.unpack_from(view, 0)
    except struct.error:
        raise ForwardFormatError("shorter than the request header") from None
    if version != FORMAT_VERSION:
        raise ForwardFormatError(f"unknown forward format version {version}")
    position = _HEAD.size
    if count < 0 or count > (len(body) - position) // _MIN_PUSH:
        raise ForwardFormatError(f"push count {count} does not fit the body")
    pushes = []
    try:
        for _ in range(count):
            push, position = _decode_push(view, position)
            pushes.append(push)
    except struct.error:
        raise ForwardFormatError("truncated push") from None
    if position != len(body):
        raise ForwardFormatError(f"{len(body) - position} bytes after the last push")
    return ForwardRequest(None if broker_id < 0 else broker_id, pushes)


def _decode_push(view: memoryview, position: int) -> tuple[ForwardedPush, int]:
    raw_id, flags, interval, received_ms, port = _PUSH_FIXED.unpack_from(view, position)
    position += _PUSH_FIXED.size
    strings: list[str | None] = []
    for _ in range(7):
        (length,) = _INT16.unpack_from(view, position)
        position += _INT16.size
        if length < 0:
            strings.append(None)
            continue
        if position + length > len(view):
            raise ForwardFormatError("string past the end of the body")
        try:
            strings.append(str(view[position : position + length], "utf-8"))
        except UnicodeDecodeError as error:
            raise ForwardFormatError(f"invalid UTF-8: {error.reason}") from None
        position += length
    (length,) = _INT32.unpack_from(view, position)
    position += _INT32.size
    if length < 0 or position + length > len(view):
        raise ForwardFormatError("payload past the end of the body")
    payload = bytes(view[position : position + length])
    position += length
    client_id, name, version, address, principal, listener, content_type = strings
    return (
        ForwardedPush(
            client_instance_id=str(Uuid.from_bytes(raw_id)),
            terminating=bool(flags & _TERMINATING),
            push_interval_ms=interval if interval >= 0 else None,
            received_time_ms=received_ms,
            client_source_port=port if 0 <= port <= 65535 else None,
            client_id=client_id,
            client_software_name=name,
            client_software_version=version,
            client_source_address=address,
            principal=principal,
            listener=listener,
            content_type=content_type,
            payload=payload,
        ),
        position,
    )
