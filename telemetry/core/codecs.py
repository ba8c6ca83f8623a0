"""Bounded decompression of PushTelemetry payloads.

A push is at most ``telemetry.max.bytes`` on the wire, but a compressed
payload can expand a thousandfold, so every codec here stops producing output
one byte past ``max_bytes`` and reports TELEMETRY_TOO_LARGE (118). That is
the newest Kafka's answer too (KAFKA-21076): a retryable error, unlike
INVALID_RECORD (87), which clients take as "stop sending telemetry for good"
and which we keep for data that is corrupt.

What real clients send: zstd frames
*without* a content size (streaming output), raw snappy blocks from
librdkafka but xerial-framed snappy from Java clients, LZ4 frames, gzip
(librdkafka uses level 0). All are accepted here.
"""

from __future__ import annotations

import enum
import io
import threading
import time
import zlib
from collections.abc import Callable
from typing import Final

import cramjam
import lz4.frame
import zstandard

from telemetry.errors import InvalidRecordError, TelemetryTooLargeError

__all__ = ["ADVERTISED_COMPRESSION_TYPES", "CompressionType", "compression_by_magic", "decompress"]


class CompressionType(enum.IntEnum):
    """Kafka's compression ids (``CompressionType.java``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# The broker's preference order in GetTelemetrySubscriptions; clients take the
# first one they support. NONE is not listed yet still accepted on push.
ADVERTISED_COMPRESSION_TYPES: Final = (
    CompressionType.ZSTD,
    CompressionType.LZ4,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
)

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE: Final = 16  # magic, int32 version, int32 minimum compatible version
_CHUNK: Final = 64 * 1024
# A zstd decoder allocates the window its frame header asks for. Frames
# without a content size get the encoder's window for its level (2 MiB at
# the default level 3, 8 MiB at level 19), so allow that much, or the bound
# if larger, and never more than zstd's own default limit.
_MIN_ZSTD_WINDOW: Final = 8 * 1024 * 1024
_MAX_ZSTD_WINDOW: Final = 128 * 1024 * 1024


#: The first bytes of each codec's frame as Kafka clients write it (Kafka's
#: ``ZstdFactory``/``KafkaLZ4BlockOutputStream``/``GZIPOutputStream``/xerial
#: ``SnappyOutputStream``, librdkafka's likewise). librdkafka's snappy is a raw
#: block, which has no magic.
_MAGICS: Final = (
    (b"\x28\xb5\x2f\xfd", CompressionType.ZSTD),
    (b"\x04\x22\x4d\x18", CompressionType.LZ4),
    (b"\x1f\x8b", CompressionType.GZIP),
    (_XERIAL_MAGIC, CompressionType.SNAPPY),
)


def compression_by_magic(data: bytes) -> CompressionType | None:
    """The codec whose frame ``data`` starts with, ``None`` when it starts with none.

    For payloads that arrive without their compression id: a Kafka 3.7
    broker hands its telemetry plugins the push still compressed (its
    ``PushTelemetryRequest.decompressMetricsData`` returns the bytes as they
    came, fixed in 3.8), and the plugin API carries no codec id.
    """
    for magic, codec in _MAGICS:
        if data.startswith(magic):
            return codec
    return None


def decompress(
    compression_type: CompressionType, data: bytes, max_bytes: int, *, share_gil: bool = False
) -> bytes:
    """Decompress ``data``, refusing output longer than ``max_bytes``.

    Every codec produces its output in slices of at most 64 KiB. With
    ``share_gil`` (for a worker thread beside an event loop) the GIL is
    released between slices, so the loop waits at most one slice for it
    rather than a whole switch interval, and zstd skips its one-shot path
    (one C call holding the GIL for the whole output).

    Raises:
        TelemetryTooLargeError: the output would exceed ``max_bytes``.
        InvalidRecordError: the data is corrupt or truncated for its codec.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must not be negative, got {max_bytes}")
    if compression_type is CompressionType.NONE:
        _check_size(len(data), max_bytes)
        return data
    if not data:
        raise InvalidRecordError(f"empty {compression_type.name} payload")
    pause = _share_gil if share_gil else _keep_gil
    if compression_type is CompressionType.GZIP:
        return _gunzip(data, max_bytes, pause)
    if compression_type is CompressionType.SNAPPY:
        if data.startswith(_XERIAL_MAGIC):
            return _unsnappy_xerial(data, max_bytes, pause)
        return _snappy_block(data, max_bytes)
    if compression_type is CompressionType.LZ4:
        return _unlz4(data, max_bytes, pause)
    return _unzstd(data, max_bytes, pause, one_shot=not share_gil)


def _share_gil() -> None:
    time.sleep(0)  # releases the GIL: a thread waiting for it (the event loop) takes it now


def _keep_gil() -> None:
    pass


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise TelemetryTooLargeError(
            f"decompressed telemetry exceeds the limit of {max_bytes} bytes"
        )


def _gunzip(data: bytes, max_bytes: int, pause: Callable[[], None]) -> bytes:
    # Java's GZIPInputStream reads concatenated members; so do we.
    out = bytearray()
    remaining = data
    while True:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        pending = remaining
        try:
            while not inflater.eof:
                piece = inflater.decompress(pending, min(_CHUNK, max_bytes + 1 - len(out)))
                out += piece
                _check_size(len(out), max_bytes)
                stalled = not piece and len(inflater.unconsumed_tail) == len(pending)
                pending = inflater.unconsumed_tail
                if not pending and not inflater.eof and not piece:
                    # Output may still be buffered inside zlib; an empty call drains it.
                    drained = inflater.decompress(b"", min(_CHUNK, max_bytes + 1 - len(out)))
                    out += drained
                    _check_size(len(out), max_bytes)
                    if not drained and not inflater.eof:
                        raise InvalidRecordError("truncated gzip payload")
                elif stalled and not inflater.eof:
                    raise InvalidRecordError("corrupt gzip payload: no progress")
                pause()
        except zlib.error as error:
            raise InvalidRecordError(f"corrupt gzip payload: {error}") from error
        remaining = inflater.unused_data
        if not remaining:
            return bytes(out)


def _snappy_preamble(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (a little-endian varint)."""
    value = 0
    for index, byte in enumerate(block[:5]):
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return value
    raise InvalidRecordError("corrupt snappy block: bad length preamble")


def _snappy_block(block: bytes, budget: int) -> bytes:
    # The preamble is checked before decompressing, so a block claiming
    # gigabytes never gets a buffer allocated for it.
    _check_size(_snappy_preamble(block), budget)
    try:
        out = bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as error:
        raise InvalidRecordError(f"corrupt snappy block: {error}") from error
    _check_size(len(out), budget)
    return out


def _unsnappy_xerial(data: bytes, max_bytes: int, pause: Callable[[], None]) -> bytes:
    """Xerial snappy-java framing: a 16-byte header, then (int32 length, raw block)*."""
    if len(data) < _XERIAL_HEADER_SIZE:
        raise InvalidRecordError("truncated xerial snappy header")
    out = bytearray()
    position = _XERIAL_HEADER_SIZE
    while position < len(data):
        if position + 4 > len(data):
            raise InvalidRecordError("truncated xerial snappy block length")
        length = int.from_bytes(data[position : position + 4], "big", signed=True)
        position += 4
        if length <= 0 or position + length > len(data):
            raise InvalidRecordError(f"bad xerial snappy block length {length}")
        out += _snappy_block(data[position : position + length], max_bytes - len(out))
        position += length
        pause()
    return bytes(out)


def _unlz4(data: bytes, max_bytes: int, pause: Callable[[], None]) -> bytes:
    try:
        # 0 when the frame declares no size; a declaration beyond the bound
        # is refused before anything is decompressed, as for zstd.
        declared = int(lz4.frame.get_frame_info(data)["content_size"])
    except RuntimeError as error:
        raise InvalidRecordError(f"corrupt lz4 frame header: {error}") from error
    _check_size(declared, max_bytes)
    decompressor = lz4.frame.LZ4FrameDecompressor()
    try:
        out = bytearray(decompressor.decompress(data, max_length=min(_CHUNK, max_bytes + 1)))
        _check_size(len(out), max_bytes)
        while not decompressor.eof and not decompressor.needs_input:
            pause()
            more = decompressor.decompress(b"", max_length=min(_CHUNK, max_bytes + 1 - len(out)))
            if not more:
                break
            out += more
            _check_size(len(out), max_bytes)
    except RuntimeError as error:
        raise InvalidRecordError(f"corrupt lz4 payload: {error}") from error
    if not decompressor.eof:
        raise InvalidRecordError("truncated lz4 payload")
    if decompressor.unused_data:
        raise InvalidRecordError("trailing bytes after the lz4 frame")
    return bytes(out)


_ZSTD_LOCAL = threading.local()
_ONE_SHOT_MIN_BYTES: Final = 16 * 1024
_ONE_SHOT_RATIO: Final = 16
# python-zstandard's message when one-shot output would pass max_output_size.
_OUTPUT_FULL: Final = "did not decompress full frame"


def _zstd_decompressor(window: int) -> zstandard.ZstdDecompressor:
    """One decompressor per window size and thread: building one costs ~11 µs a push.

    A ``ZstdDecompressor`` must not be shared between threads, hence the
    thread-local cache; the window bound is part of the key because it is part
    of the decompressor.
    """
    cache: dict[int, zstandard.ZstdDecompressor] | None = getattr(_ZSTD_LOCAL, "by_window", None)
    if cache is None:
        cache = {}
        _ZSTD_LOCAL.by_window = cache
    decompressor = cache.get(window)
    if decompressor is None:
        decompressor = zstandard.ZstdDecompressor(max_window_size=window)
        cache[window] = decompressor
    return decompressor


def _unzstd(data: bytes, max_bytes: int, pause: Callable[[], None], *, one_shot: bool) -> bytes:
    window = min(_MAX_ZSTD_WINDOW, max(_MIN_ZSTD_WINDOW, max_bytes))
    # The stream reader stops quietly at the end of its input, even inside a
    # frame, so check the frames are whole before trusting its output; a
    # frame declaring more content than the bound is refused right there.
    frames = _check_zstd_frames(data, window, max_bytes)
    # _zstd_decompressor's cache hit, inlined: every zstd push comes here.
    by_window: dict[int, zstandard.ZstdDecompressor] | None = getattr(
        _ZSTD_LOCAL, "by_window", None
    )
    decompressor = by_window.get(window) if by_window is not None else None
    if decompressor is None:
        decompressor = _zstd_decompressor(window)
    if frames == 1 and one_shot:
        # The common case (one librdkafka frame, ~10× compression): one-shot
        # into a buffer of a likely size, 4× cheaper than streaming. Anything
        # unusual (bigger output, corruption) takes the careful path below.
        # python-zstandard sizes the buffer by the frame's declared content
        # size when there is one, ignoring max_output_size: safe only because
        # _check_zstd_frames refused declarations beyond max_bytes.
        likely = min(max_bytes, max(_ONE_SHOT_MIN_BYTES, _ONE_SHOT_RATIO * len(data)))
        for room in (likely, max_bytes) if likely < max_bytes else (max_bytes,):
            # A frame that outgrows the likely size is decoded once more into a
            # buffer of the bound: only the pages it writes are resident and the
            # result is shrunk in place, where streaming holds its output twice
            # (the growing buffer and its copy): 64 MiB for two decoding threads
            # at a 16 MiB bound, against 32 (benchmarks/hostile_bench.py).
            try:
                return decompressor.decompress(data, max_output_size=room)
            except zstandard.ZstdError as error:
                if _OUTPUT_FULL not in str(error):
                    break  # corrupt: the stream below names the error
                if room == max_bytes:
                    # The frames are whole (checked above) and the decoder
                    # needed more room than the bound: too large by what it
                    # produces, and not worth producing again by streaming.
                    raise TelemetryTooLargeError(
                        f"decompressed telemetry exceeds the limit of {max_bytes} bytes"
                    ) from error
    # Frames from streaming encoders carry no content size, so one-shot
    # decompression cannot size its buffer: read a stream up to the bound.
    out = bytearray()
    try:
        with decompressor.stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
            while True:
                chunk = reader.read(min(_CHUNK, max_bytes + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
                _check_size(len(out), max_bytes)
                pause()
    except zstandard.ZstdError as error:
        raise InvalidRecordError(f"corrupt zstd payload: {error}") from error
    return bytes(out)


_ZSTD_MAGIC: Final = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK: Final = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC: Final = 0x184D2A50
# ZSTD_CONTENTSIZE_UNKNOWN and ZSTD_CONTENTSIZE_ERROR, as python-zstandard reports them.
_ZSTD_NO_CONTENT_SIZE: Final = frozenset({2**64 - 1, 2**64 - 2})


def _check_zstd_frames(data: bytes, max_window: int, max_bytes: int) -> int:
    """Walk the frame and block headers (``ZSTD_findFrameCompressedSize``).

    A window beyond ``max_window``, or declared content sizes adding up to
    more than ``max_bytes``, are TELEMETRY_TOO_LARGE rather than corrupt: the
    frame is valid, only too big for us, and 87 would make Java clients stop
    sending telemetry. Nothing is allocated before this check. Returns how
    many frames (skippable ones included) the data holds.
    """
    frames = 0
    declared = 0
    position = 0
    end = len(data)
    while position < end:
        frames += 1
        if position + 4 > end:
            raise InvalidRecordError("truncated zstd frame")
        magic = data[position] | data[position + 1] << 8 | data[position + 2] << 16
        magic |= data[position + 3] << 24
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if position + 8 > end:
                raise InvalidRecordError("truncated zstd skippable frame")
            position += 8 + int.from_bytes(data[position + 4 : position + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise InvalidRecordError("corrupt zstd payload: bad frame magic")
        # The usual payload is one frame: its header is read in place, not from a copy.
        frame = data if position == 0 else data[position:]
        header_size, content_size = _zstd_frame_header(frame, max_window)
        declared += content_size
        if declared > max_bytes:
            raise TelemetryTooLargeError(
                f"zstd frames declare {declared} bytes of content, over the limit of"
                f" {max_bytes} bytes"
            )
        has_checksum = data[position + 4] & 0x04
        position += header_size
        last_block = 0
        while not last_block:
            if position + 3 > end:
                raise InvalidRecordError("truncated zstd block header")
            # The block header, 3 bytes little-endian, read by index (no slice, no call).
            block_header = data[position] | data[position + 1] << 8 | data[position + 2] << 16
            last_block = block_header & 1
            block_type = (block_header >> 1) & 3
            if block_type == 3:
                raise InvalidRecordError("corrupt zstd payload: reserved block type")
            # An RLE block (type 1) stores one byte, repeated block-size times.
            position += 4 if block_type == 1 else 3 + (block_header >> 3)
        if has_checksum:
            position += 4
    if position > end:
        raise InvalidRecordError("truncated zstd frame")
    return frames


def _zstd_frame_header(frame: bytes, max_window: int) -> tuple[int, int]:
    """The frame header's size and declared content size (0 when it declares none)."""
    try:
        header_size = zstandard.frame_header_size(frame)
        parameters = zstandard.get_frame_parameters(frame)
    except zstandard.ZstdError as error:
        raise InvalidRecordError(f"truncated zstd frame header: {error}") from error
    if parameters.window_size > max_window:
        raise TelemetryTooLargeError(f"zstd frame needs a {parameters.window_size}-byte window")
    if parameters.content_size in _ZSTD_NO_CONTENT_SIZE:
        return header_size, 0
    return header_size, parameters.content_size
