"""Kafka protocol primitive types: a bounds-checked reader and an appending writer.

Every message module is written against these two classes, so this is the one
place that turns hostile bytes into :class:`MalformedFrameError`. Nothing below
lets ``IndexError``, ``struct.error`` or ``UnicodeDecodeError`` escape: a
listener that catches one exception type can never be crashed by a frame.

Flexible versions (KIP-482) switch strings, bytes and arrays to "compact"
encodings (unsigned-varint length + 1, 0 meaning null) and append a tagged-field
section to every struct; the ``compact`` flag on each method picks the encoding,
so message code passes its ``flexible`` flag straight through.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Final, TypeVar, final
from uuid import UUID

from telemetry.wire.errors import MalformedFrameError, TooManyElementsError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

T = TypeVar("T")

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_U32: Final = struct.Struct(">I")

_U32_MAX: Final = 0xFFFFFFFF

ZERO_UUID: Final = UUID(int=0)
"""Kafka's ``Uuid.ZERO_UUID``: "not set" for client instance ids and topic ids."""


def _short(what: str, pos: int) -> MalformedFrameError:
    return MalformedFrameError(f"frame truncated reading {what} at offset {pos}")


MAX_ADMIN_ITEMS: Final = 1000
"""The most resources, entities, users or keys one admin request may name.

Every admin answer costs work per item (a described config, a validated
change, a token drawn); a request naming more is refused at its array's
count, before any item is decoded, by closing the connection.
"""


def _within(count: int, limit: int | None, position: int) -> int:
    if limit is not None and count > limit:
        raise TooManyElementsError(
            f"an array of {count} elements at offset {position}, more than {limit}"
        )
    return count


@final
class Reader:
    """Reads Kafka primitives from ``data``, advancing :attr:`pos`.

    The buffer is immutable ``bytes`` so slices handed to messages (strings,
    the PushTelemetry payload) never alias a buffer the listener reuses.
    """

    __slots__ = ("_buf", "_len", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self._buf = data
        self._len = len(data)
        self.pos = pos

    @property
    def remaining(self) -> int:
        return self._len - self.pos

    def expect_end(self) -> None:
        """Refuse trailing bytes: they mean the header or body version was misread."""
        if self.pos != self._len:
            raise MalformedFrameError(
                f"{self._len - self.pos} unexpected trailing bytes at offset {self.pos}"
            )

    def raw(self, n: int) -> bytes:
        pos = self.pos
        end = pos + n
        if n < 0 or end > self._len:
            raise _short(f"{n} bytes", pos)
        self.pos = end
        return self._buf[pos:end]

    def unpack(self, packer: struct.Struct) -> tuple[Any, ...]:
        """Read a run of fixed-width fields at once; the hot messages use it to
        replace several method calls with one ``unpack_from``."""
        try:
            values = packer.unpack_from(self._buf, self.pos)
        except struct.error:
            raise _short(f"{packer.size} bytes ({packer.format})", self.pos) from None
        self.pos += packer.size
        return values

    def int8(self) -> int:
        try:
            (value,) = _I8.unpack_from(self._buf, self.pos)
        except struct.error:
            raise _short("int8", self.pos) from None
        self.pos += 1
        return int(value)

    def int16(self) -> int:
        try:
            (value,) = _I16.unpack_from(self._buf, self.pos)
        except struct.error:
            raise _short("int16", self.pos) from None
        self.pos += 2
        return int(value)

    def int32(self) -> int:
        try:
            (value,) = _I32.unpack_from(self._buf, self.pos)
        except struct.error:
            raise _short("int32", self.pos) from None
        self.pos += 4
        return int(value)

    def int64(self) -> int:
        try:
            (value,) = _I64.unpack_from(self._buf, self.pos)
        except struct.error:
            raise _short("int64", self.pos) from None
        self.pos += 8
        return int(value)

    def uint32(self) -> int:
        try:
            (value,) = _U32.unpack_from(self._buf, self.pos)
        except struct.error:
            raise _short("uint32", self.pos) from None
        self.pos += 4
        return int(value)

    def boolean(self) -> bool:
        # Kafka reads any non-zero byte as true (``readByte() != 0``).
        pos = self.pos
        if pos >= self._len:
            raise _short("boolean", pos)
        self.pos = pos + 1
        return self._buf[pos] != 0

    def uuid(self) -> UUID:
        pos = self.pos
        end = pos + 16
        if end > self._len:
            raise _short("uuid", pos)
        self.pos = end
        return UUID(bytes=self._buf[pos:end])

    def uvarint(self) -> int:
        """Unsigned varint of at most 32 bits, as Kafka's ``readUnsignedVarint``."""
        buf = self._buf
        pos = self.pos
        if pos >= self._len:
            raise _short("varint", pos)
        byte = buf[pos]
        if byte < 0x80:  # the one-byte case is nearly every length and tag count
            self.pos = pos + 1
            return byte
        result = byte & 0x7F
        shift = 7
        pos += 1
        while True:
            if pos >= self._len:
                raise _short("varint", pos)
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 28:
                raise MalformedFrameError(f"varint longer than 5 bytes at offset {self.pos}")
        if result > _U32_MAX:
            raise MalformedFrameError(f"varint exceeds 32 bits at offset {self.pos}")
        self.pos = pos
        return result

    def varint(self) -> int:
        """Zigzag-encoded signed varint (record headers, KIP-482 uses unsigned only)."""
        value = self.uvarint()
        return (value >> 1) ^ -(value & 1)

    def _length(self, compact: bool, what: str, classic: struct.Struct = _I32) -> int:
        """Decode a length prefix; -1 means null. Lengths past the buffer end are lies."""
        pos = self.pos
        if compact:
            n = self.uvarint() - 1
        else:
            try:
                (n,) = classic.unpack_from(self._buf, pos)
            except struct.error:
                raise _short(f"{what} length", pos) from None
            self.pos = pos + classic.size
        if n < -1:
            raise MalformedFrameError(f"negative {what} length {n} at offset {pos}")
        if n > self._len - self.pos:
            raise MalformedFrameError(
                f"{what} length {n} exceeds the {self._len - self.pos} bytes left at offset {pos}"
            )
        return n

    def _text(self, n: int) -> str:
        pos = self.pos
        end = pos + n
        self.pos = end
        try:
            return self._buf[pos:end].decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedFrameError(f"invalid UTF-8 in string at offset {pos}") from None

    def string(self, compact: bool) -> str:
        n = self._length(compact, "string", _I16)
        if n < 0:
            raise MalformedFrameError(f"non-nullable string is null at offset {self.pos}")
        return self._text(n)

    def nullable_string(self, compact: bool) -> str | None:
        n = self._length(compact, "string", _I16)
        return None if n < 0 else self._text(n)

    def bytes_(self, compact: bool) -> bytes:
        n = self._length(compact, "bytes")
        if n < 0:
            raise MalformedFrameError(f"non-nullable bytes is null at offset {self.pos}")
        return self.raw(n)

    def nullable_bytes(self, compact: bool) -> bytes | None:
        n = self._length(compact, "bytes")
        return None if n < 0 else self.raw(n)

    def array_length(self, compact: bool) -> int:
        """Element count of a non-nullable array.

        Every element takes at least one byte, so a count above the bytes left
        is refused before any per-element work (no allocation from a lying count).
        """
        n = self._length(compact, "array")
        if n < 0:
            raise MalformedFrameError(f"non-nullable array is null at offset {self.pos}")
        return n

    def nullable_array_length(self, compact: bool) -> int | None:
        n = self._length(compact, "array")
        return None if n < 0 else n

    def array(
        self, item: Callable[[Reader], T], compact: bool, *, limit: int | None = None
    ) -> list[T]:
        """``limit``: the most elements a request may carry, refused at the count."""
        n = _within(self.array_length(compact), limit, self.pos)
        return [item(self) for _ in range(n)]

    def nullable_array(
        self, item: Callable[[Reader], T], compact: bool, *, limit: int | None = None
    ) -> list[T] | None:
        n = self.nullable_array_length(compact)
        return None if n is None else [item(self) for _ in range(_within(n, limit, self.pos))]

    def int8_array(self, compact: bool, *, limit: int | None = None) -> tuple[int, ...]:
        n = _within(self.array_length(compact), limit, self.pos)
        return struct.unpack(f">{n}b", self.raw(n))

    def int32_array(self, compact: bool) -> tuple[int, ...]:
        n = self.array_length(compact)
        return struct.unpack(f">{n}i", self.raw(4 * n))

    def tagged_fields(self) -> None:
        """Skip a KIP-482 tagged-field section; none of kip714's messages define a tag
        it needs to read, and unknown tags must be ignored for forward compatibility."""
        count = self.uvarint()
        if 2 * count > self._len - self.pos:  # each field is at least a tag and a size byte
            raise MalformedFrameError(f"{count} tagged fields cannot fit the frame")
        for _ in range(count):
            self.uvarint()  # tag
            size = self.uvarint()
            if size > self._len - self.pos:
                raise MalformedFrameError(f"tagged field of {size} bytes overruns the frame")
            self.pos += size


@final
class Writer:
    """Appends Kafka primitives to a growing buffer.

    Out-of-range values raise ``ValueError``: they are bugs in kip714, never
    network input, and must not produce a frame the client would misparse.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self._buf)

    def reserve_size_prefix(self) -> None:
        """Start a frame: room for the INT32 size, filled in by :meth:`size_prefixed`."""
        self._buf += b"\0\0\0\0"

    def size_prefixed(self) -> bytes:
        """The buffer as a frame whose INT32 prefix counts the bytes after it."""
        _I32.pack_into(self._buf, 0, len(self._buf) - 4)
        return bytes(self._buf)

    def __len__(self) -> int:
        return len(self._buf)

    def raw(self, data: bytes) -> None:
        self._buf += data

    def _pack(self, packer: struct.Struct, value: int) -> None:
        try:
            self._buf += packer.pack(value)
        except struct.error as exc:
            raise ValueError(f"{value!r} does not fit {packer.format}: {exc}") from None

    def int8(self, value: int) -> None:
        self._pack(_I8, value)

    def int16(self, value: int) -> None:
        self._pack(_I16, value)

    def int32(self, value: int) -> None:
        self._pack(_I32, value)

    def int64(self, value: int) -> None:
        self._pack(_I64, value)

    def uint32(self, value: int) -> None:
        self._pack(_U32, value)

    def boolean(self, value: bool) -> None:
        self._buf.append(1 if value else 0)

    def uuid(self, value: UUID) -> None:
        self._buf += value.bytes

    def uvarint(self, value: int) -> None:
        if not 0 <= value <= _U32_MAX:
            raise ValueError(f"unsigned varint out of range: {value}")
        buf = self._buf
        while value >= 0x80:
            buf.append((value & 0x7F) | 0x80)
            value >>= 7
        buf.append(value)

    def varint(self, value: int) -> None:
        if not -(2**31) <= value < 2**31:
            raise ValueError(f"varint out of int32 range: {value}")
        self.uvarint(((value << 1) ^ (value >> 31)) & _U32_MAX)

    def _length(self, n: int, compact: bool, classic: struct.Struct = _I32) -> None:
        if compact:
            self.uvarint(n + 1)
        else:
            self._pack(classic, n)

    def string(self, value: str, compact: bool) -> None:
        data = value.encode("utf-8")
        self._length(len(data), compact, _I16)
        self._buf += data

    def nullable_string(self, value: str | None, compact: bool) -> None:
        if value is None:
            self._length(-1, compact, _I16)
        else:
            self.string(value, compact)

    def bytes_(self, value: bytes, compact: bool) -> None:
        self._length(len(value), compact)
        self._buf += value

    def nullable_bytes(self, value: bytes | None, compact: bool) -> None:
        if value is None:
            self._length(-1, compact)
        else:
            self.bytes_(value, compact)

    def array_length(self, n: int, compact: bool) -> None:
        self._length(n, compact)

    def nullable_array_length(self, n: int | None, compact: bool) -> None:
        self._length(-1 if n is None else n, compact)

    def array(self, items: Sequence[T], item: Callable[[Writer, T], None], compact: bool) -> None:
        self._length(len(items), compact)
        for value in items:
            item(self, value)

    def int8_array(self, values: Sequence[int], compact: bool) -> None:
        self._length(len(values), compact)
        try:
            self._buf += struct.pack(f">{len(values)}b", *values)
        except struct.error as exc:
            raise ValueError(f"int8 array value out of range: {exc}") from None

    def int32_array(self, values: Sequence[int], compact: bool) -> None:
        self._length(len(values), compact)
        try:
            self._buf += struct.pack(f">{len(values)}i", *values)
        except struct.error as exc:
            raise ValueError(f"int32 array value out of range: {exc}") from None

    def tagged_fields(self) -> None:
        """An empty KIP-482 tagged-field section: kip714 never sends optional tags."""
        self._buf.append(0)
