"""HTTP request bodies: a bounded read, and bounded decoding of ``Content-Encoding``.

A body is read up to a limit and no further, and a compressed body is
decoded with a bound on what is *produced*, never on what a header claims:
a few kilobytes of gzip can inflate to gigabytes. The encodings are the ones
the OpenTelemetry Collector's HTTP receivers accept (``confighttp``): gzip,
deflate (also named zlib), zstd, snappy (a raw block, or the framing format,
told apart by the stream identifier as the Collector does),
x-snappy-framed, lz4 (frame format). gzip, zstd, lz4 and raw snappy go
through :func:`telemetry.core.codecs.decompress`, which bounds the same codecs for
PushTelemetry; deflate and framed snappy, which KIP-714 never carries, are
decoded here.

The server must run with aiohttp's ``auto_decompress=False``: otherwise
aiohttp inflates gzip, deflate and zstd bodies itself before any handler
sees them, without this module's bound.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import TYPE_CHECKING, Final

import cramjam
import crc32c

from telemetry.core.codecs import CompressionType, decompress
from telemetry.errors import InvalidRecordError, TelemetryTooLargeError

if TYPE_CHECKING:
    from collections.abc import Callable

    from aiohttp import web

__all__ = [
    "CONTENT_ENCODINGS",
    "BodyTooLargeError",
    "UnsupportedEncodingError",
    "decode_content",
    "read_body",
    "read_prefix",
    "sent_codec",
]

_READ_CHUNK: Final = 64 * 1024


class BodyTooLargeError(Exception):
    """The body as sent is longer than the limit; only the limit plus one byte was read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds {limit} bytes")
        self.limit = limit


class UnsupportedEncodingError(Exception):
    """A ``Content-Encoding`` this server does not decode."""


async def read_body(request: web.Request, max_bytes: int) -> bytes:
    """Read the body, at most ``max_bytes``; a longer one raises :class:`BodyTooLargeError`.

    A ``Content-Length`` above the limit is refused before reading anything;
    a body sent without one (chunked) is refused once it passes the limit,
    having read one byte more than the limit.
    """
    length = request.content_length
    if length is not None and length > max_bytes:
        raise BodyTooLargeError(max_bytes)
    if length is not None:
        # The parser delivers exactly Content-Length bytes: joined once, no copy after.
        try:
            return await request.content.readexactly(length)
        except asyncio.IncompleteReadError as short:
            return short.partial
    body = await read_prefix(request, max_bytes + 1)
    if len(body) > max_bytes:
        raise BodyTooLargeError(max_bytes)
    return body


async def read_prefix(request: web.Request, limit: int) -> bytes:
    """The body's first ``limit`` bytes, or all of it if shorter."""
    body = bytearray()
    content = request.content
    while len(body) < limit:
        chunk = await content.read(min(_READ_CHUNK, limit - len(body)))
        if not chunk:
            break
        body += chunk
    return bytes(body)


def decode_content(encoding: str, body: bytes, max_bytes: int) -> bytes:
    """Undo ``Content-Encoding``, producing at most ``max_bytes``.

    Raises:
        UnsupportedEncodingError: an encoding not in :data:`CONTENT_ENCODINGS`.
        TelemetryTooLargeError: the decoded body would exceed ``max_bytes``.
        InvalidRecordError: the body is corrupt or truncated for its encoding.
    """
    decoder = CONTENT_ENCODINGS.get(encoding.strip().lower())
    if decoder is None:
        raise UnsupportedEncodingError(f"unsupported Content-Encoding {encoding!r}")
    return decoder(body, max_bytes)


def _identity(body: bytes, max_bytes: int) -> bytes:
    return decompress(CompressionType.NONE, body, max_bytes)


def _codec(codec: CompressionType) -> Callable[[bytes, int], bytes]:
    def decode(body: bytes, max_bytes: int) -> bytes:
        return decompress(codec, body, max_bytes)

    return decode


def _too_large(max_bytes: int) -> TelemetryTooLargeError:
    return TelemetryTooLargeError(f"decoded body exceeds the limit of {max_bytes} bytes")


def _inflate(body: bytes, max_bytes: int) -> bytes:
    """HTTP ``deflate`` is zlib-wrapped (RFC 9110 §8.4.1.2); raw deflate is taken too.

    Some senders get this wrong and send a raw deflate stream, so, like
    aiohttp and browsers, look at the first byte: a zlib header has
    compression method 8 in its low nibble.
    """
    if not body:
        raise InvalidRecordError("empty deflate body")
    wbits = zlib.MAX_WBITS if body[0] & 0x0F == 8 else -zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    out = bytearray()
    pending = body
    try:
        while not inflater.eof:
            produced = inflater.decompress(pending, max_bytes + 1 - len(out))
            out += produced
            if len(out) > max_bytes:
                raise _too_large(max_bytes)
            pending = inflater.unconsumed_tail
            if not pending and not produced and not inflater.eof:
                raise InvalidRecordError("truncated deflate body")
    except zlib.error as error:
        raise InvalidRecordError(f"corrupt deflate body: {error}") from error
    if inflater.unused_data:
        raise InvalidRecordError("trailing bytes after the deflate stream")
    return bytes(out)


# The snappy framing format (google/snappy framing_format.txt): a stream
# identifier chunk, then chunks of [type:1][length:3 LE][data]; data chunks
# start with a masked CRC-32C of their uncompressed bytes and hold at most
# 65536 uncompressed bytes each.
_SNAPPY_STREAM_ID: Final = b"\xff\x06\x00\x00sNaPpY"
_SNAPPY_COMPRESSED: Final = 0x00
_SNAPPY_UNCOMPRESSED: Final = 0x01
_SNAPPY_PADDING_MIN: Final = 0x80
_SNAPPY_MAX_CHUNK_OUTPUT: Final = 65536
_U32: Final = 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    crc = crc32c.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _U32) + 0xA282EAD8) & _U32


def _snappy(body: bytes, max_bytes: int) -> bytes:
    """``snappy``: the framing format if it starts with the stream identifier, else one block."""
    if body.startswith(_SNAPPY_STREAM_ID):
        return _snappy_framed(body, max_bytes)
    return _snappy_block(body, max_bytes)


def _snappy_block(block: bytes, max_bytes: int, limit: int | None = None) -> bytes:
    """One raw block of at most ``max_bytes`` (``limit``: the whole body's, for the message)."""
    # The declared length is checked before a buffer is allocated for it.
    try:
        declared = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as error:
        raise InvalidRecordError(f"corrupt snappy block: {error}") from error
    if declared > max_bytes:
        raise _too_large(max_bytes if limit is None else limit)
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as error:
        raise InvalidRecordError(f"corrupt snappy block: {error}") from error


def _snappy_framed(body: bytes, max_bytes: int) -> bytes:
    if not body.startswith(_SNAPPY_STREAM_ID):
        raise InvalidRecordError("snappy framing: missing stream identifier")
    out = bytearray()
    position = 0
    while position < len(body):
        if position + 4 > len(body):
            raise InvalidRecordError("snappy framing: truncated chunk header")
        kind = body[position]
        length = int.from_bytes(body[position + 1 : position + 4], "little")
        start, position = position + 4, position + 4 + length
        if position > len(body):
            raise InvalidRecordError("snappy framing: truncated chunk")
        chunk = body[start:position]
        if kind == 0xFF:
            if chunk != _SNAPPY_STREAM_ID[4:]:
                raise InvalidRecordError("snappy framing: bad stream identifier")
            continue
        if kind >= _SNAPPY_PADDING_MIN:
            continue  # skippable chunks (padding)
        if kind not in {_SNAPPY_COMPRESSED, _SNAPPY_UNCOMPRESSED} or length < 4:
            raise InvalidRecordError(f"snappy framing: unskippable chunk type {kind:#x}")
        data = chunk[4:]
        if kind == _SNAPPY_COMPRESSED:
            data = _snappy_block(data, max_bytes - len(out), max_bytes)
        if len(data) > _SNAPPY_MAX_CHUNK_OUTPUT:
            raise InvalidRecordError("snappy framing: a chunk holds more than 64 KiB")
        if _masked_crc(data) != int.from_bytes(chunk[:4], "little"):
            raise InvalidRecordError("snappy framing: checksum mismatch")
        out += data
        if len(out) > max_bytes:
            raise _too_large(max_bytes)
    return bytes(out)


#: The encodings whose body is a Kafka codec's payload as it is:
#: ``codecs.decompress`` with that id decodes it as :data:`CONTENT_ENCODINGS` does.
_KAFKA_CODECS: Final = {
    "": CompressionType.NONE,
    "identity": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "x-gzip": CompressionType.GZIP,
    "zstd": CompressionType.ZSTD,
    "lz4": CompressionType.LZ4,
    "snappy": CompressionType.SNAPPY,
}
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"


def sent_codec(encoding: str, body: bytes) -> CompressionType | None:
    """The Kafka compression id under which ``body`` can be logged as sent, if any.

    ``None`` for deflate and framed snappy, which KIP-714 has no id for (the
    decoded body is logged instead). A raw snappy block that happens to start
    like xerial framing (which ``codecs`` would read as such) is ``None`` too.
    """
    codec = _KAFKA_CODECS.get(encoding.strip().lower())
    if codec is CompressionType.SNAPPY and body.startswith((_SNAPPY_STREAM_ID, _XERIAL_MAGIC)):
        return None
    return codec


#: Every accepted ``Content-Encoding`` (lower case) and its bounded decoder.
CONTENT_ENCODINGS: Final[dict[str, Callable[[bytes, int], bytes]]] = {
    "": _identity,
    "identity": _identity,
    "gzip": _codec(CompressionType.GZIP),
    "x-gzip": _codec(CompressionType.GZIP),
    "deflate": _inflate,
    "zlib": _inflate,
    "zstd": _codec(CompressionType.ZSTD),
    "lz4": _codec(CompressionType.LZ4),
    "snappy": _snappy,
    "x-snappy-framed": _snappy_framed,
}
