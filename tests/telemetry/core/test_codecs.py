"""Bounded decompression for every codec: exact bounds, bombs, corrupt and truncated data."""

from __future__ import annotations

import gzip
import os
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import cramjam
import lz4.frame
import pytest
import zstandard

from telemetry.core.codecs import (
    ADVERTISED_COMPRESSION_TYPES,
    CompressionType,
    compression_by_magic,
    decompress,
)
from telemetry.errors import ErrorCode, InvalidRecordError, TelemetryTooLargeError
from tests.telemetry.kafka_wire_client import (
    otlp_payload,
    xerial_snappy,
    zstd_declaring,
    zstd_stream,
)

PAYLOAD = os.urandom(700) + b"org.apache.kafka.producer.record.queue.time.avg " * 200
BOMB_SIZE = 48 * 1024 * 1024  # what each bomb would expand to
BOUND = 64 * 1024
XERIAL_HEADER = b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")


def zero_chunks(total: int, chunk: int = 1024 * 1024) -> Iterator[bytes]:
    block = bytes(chunk)
    for _ in range(total // chunk):
        yield block


def gzip_bytes(data: bytes, level: int = 6) -> bytes:
    return gzip.compress(data, compresslevel=level)


def zstd_streamed(data: bytes) -> bytes:
    """A frame without content size, as librdkafka's streaming compression writes."""
    compressor = zstandard.ZstdCompressor().compressobj()
    return compressor.compress(data) + compressor.flush()


def lz4_bytes(data: bytes) -> bytes:
    return bytes(lz4.frame.compress(data))


def snappy_raw(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(data))


def snappy_xerial(data: bytes, block_size: int = 32 * 1024) -> bytes:
    """snappy-java's framing, as Java clients send it."""
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(data), block_size):
        block = snappy_raw(data[start : start + block_size])
        out += len(block).to_bytes(4, "big") + block
    return bytes(out)


ENCODERS: dict[str, tuple[CompressionType, Callable[[bytes], bytes]]] = {
    "gzip": (CompressionType.GZIP, gzip_bytes),
    "gzip-level-0": (CompressionType.GZIP, lambda data: gzip_bytes(data, level=0)),
    "snappy-raw": (CompressionType.SNAPPY, snappy_raw),
    "snappy-xerial": (CompressionType.SNAPPY, snappy_xerial),
    "lz4": (CompressionType.LZ4, lz4_bytes),
    "zstd": (CompressionType.ZSTD, zstd_streamed),
}


def test_compression_ids_and_advertised_order() -> None:
    assert [int(c) for c in CompressionType] == [0, 1, 2, 3, 4]
    assert [int(c) for c in ADVERTISED_COMPRESSION_TYPES] == [4, 3, 1, 2]


@pytest.mark.parametrize("name", ENCODERS)
def test_round_trip(name: str) -> None:
    codec, encode = ENCODERS[name]
    assert decompress(codec, encode(PAYLOAD), 10 * len(PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("name", ENCODERS)
def test_bound_is_inclusive_to_the_byte(name: str) -> None:
    codec, encode = ENCODERS[name]
    data = encode(PAYLOAD)
    assert decompress(codec, data, len(PAYLOAD)) == PAYLOAD
    with pytest.raises(TelemetryTooLargeError) as info:
        decompress(codec, data, len(PAYLOAD) - 1)
    assert info.value.error_code == ErrorCode.TELEMETRY_TOO_LARGE


def test_none_is_bounded_too() -> None:
    assert decompress(CompressionType.NONE, b"abc", 3) == b"abc"
    with pytest.raises(TelemetryTooLargeError):
        decompress(CompressionType.NONE, b"abcd", 3)


def _gzip_bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(compressor.compress(c) for c in zero_chunks(BOMB_SIZE)) + compressor.flush()


def _zstd_bomb() -> bytes:
    compressor = zstandard.ZstdCompressor(level=1).compressobj()
    parts = [compressor.compress(c) for c in zero_chunks(BOMB_SIZE)]
    return b"".join(parts) + bytes(compressor.flush())


def _lz4_bomb() -> bytes:
    compressor = lz4.frame.LZ4FrameCompressor()
    parts: list[bytes] = [compressor.begin()]
    parts += [compressor.compress(c) for c in zero_chunks(BOMB_SIZE)]
    return b"".join(parts) + bytes(compressor.flush())


def _snappy_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _snappy_block_bomb(declared: int, produced: int) -> bytes:
    """A raw snappy block: a 1-byte literal, then 64-byte copies at offset 1."""
    copy_64 = bytes([(64 - 1) << 2 | 2, 1, 0])
    return _snappy_varint(declared) + b"\x00\x00" + copy_64 * ((produced - 1) // 64)


def _snappy_raw_bomb() -> bytes:
    return _snappy_block_bomb(BOMB_SIZE, BOMB_SIZE)


def _snappy_xerial_bomb() -> bytes:
    # Many honest blocks, each within the bound, together far beyond it.
    block = _snappy_block_bomb(32 * 1024 + 1, 32 * 1024 + 1)
    framed = len(block).to_bytes(4, "big") + block
    return XERIAL_HEADER + framed * (BOMB_SIZE // (32 * 1024))


BOMBS: dict[str, tuple[CompressionType, Callable[[], bytes]]] = {
    "gzip": (CompressionType.GZIP, _gzip_bomb),
    "zstd": (CompressionType.ZSTD, _zstd_bomb),
    "lz4": (CompressionType.LZ4, _lz4_bomb),
    "snappy-raw": (CompressionType.SNAPPY, _snappy_raw_bomb),
    "snappy-xerial": (CompressionType.SNAPPY, _snappy_xerial_bomb),
}


@pytest.mark.parametrize("name", BOMBS)
def test_compression_bomb_stops_at_the_bound(name: str) -> None:
    codec, build = BOMBS[name]
    bomb = build()
    assert len(bomb) < BOMB_SIZE // 20
    tracemalloc.start()
    try:
        with pytest.raises(TelemetryTooLargeError):
            decompress(codec, bomb, BOUND)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The 48 MiB never materialise: the peak stays near the input plus the bound.
    assert peak < len(bomb) + 8 * 1024 * 1024


def test_zstd_frame_without_content_size() -> None:
    frame = zstd_streamed(PAYLOAD)
    assert zstandard.frame_content_size(frame) == -1
    with pytest.raises(zstandard.ZstdError):
        zstandard.ZstdDecompressor().decompress(frame)  # why a stream reader is needed
    assert decompress(CompressionType.ZSTD, frame, len(PAYLOAD)) == PAYLOAD


def test_a_big_zstd_stream_is_held_once_while_it_decodes() -> None:
    """A 15 MiB output from a frame without a content size: one buffer, not a buffer and its copy.

    Streaming into a growing buffer and copying it out held twice the output
    (32 MiB per decoding thread at the 16 MiB bound); the one-shot retry
    writes into one buffer of the bound, shrunk in place.
    """
    decoded = bytes(range(256)) * (15 * 1024 * 4)  # 15 MiB
    frame = zstd_streamed(decoded)
    assert zstandard.frame_content_size(frame) == -1
    bound = 16 * 1024 * 1024
    tracemalloc.start()
    try:
        out = decompress(CompressionType.ZSTD, frame, bound)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out == decoded
    assert peak < bound + len(frame) + 1024 * 1024  # streaming's peak: about 2 x 15 MiB
    with pytest.raises(TelemetryTooLargeError):
        decompress(CompressionType.ZSTD, frame, len(decoded) - 1)


def test_zstd_frame_with_content_size_and_checksum() -> None:
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(PAYLOAD)
    assert zstandard.frame_content_size(frame) == len(PAYLOAD)
    assert decompress(CompressionType.ZSTD, frame, len(PAYLOAD)) == PAYLOAD


def test_zstd_concatenated_and_skippable_frames() -> None:
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"xyz"
    data = zstd_streamed(b"abc") + skippable + zstd_streamed(b"def")
    assert decompress(CompressionType.ZSTD, data, 6) == b"abcdef"


def test_gzip_concatenated_members() -> None:
    assert decompress(CompressionType.GZIP, gzip_bytes(b"ab") + gzip_bytes(b"cd"), 4) == b"abcd"


def test_snappy_lying_preamble_is_corrupt() -> None:
    block = _snappy_block_bomb(100, 10_000)
    with pytest.raises(InvalidRecordError) as info:
        decompress(CompressionType.SNAPPY, block, BOUND)
    assert info.value.error_code == ErrorCode.INVALID_RECORD


def test_snappy_raw_and_xerial_agree() -> None:
    raw = decompress(CompressionType.SNAPPY, snappy_raw(PAYLOAD), len(PAYLOAD))
    framed = decompress(CompressionType.SNAPPY, snappy_xerial(PAYLOAD, 1000), len(PAYLOAD))
    assert raw == framed == PAYLOAD


def test_empty_snappy_block_and_xerial_stream_are_empty() -> None:
    assert decompress(CompressionType.SNAPPY, b"\x00", 0) == b""
    assert decompress(CompressionType.SNAPPY, XERIAL_HEADER, 0) == b""


@pytest.mark.parametrize("name", ENCODERS)
def test_truncated_payload_is_invalid_record(name: str) -> None:
    codec, encode = ENCODERS[name]
    data = encode(PAYLOAD)
    for cut in (1, 5, len(data) // 2, len(data) - 1):
        with pytest.raises(InvalidRecordError):
            decompress(codec, data[:cut], 10 * len(PAYLOAD))


@pytest.mark.parametrize("codec", [c for c in CompressionType if c is not CompressionType.NONE])
@pytest.mark.parametrize(
    "garbage", [b"\x01", b"not compressed at all", b"\xff" * 64, XERIAL_HEADER[:10]]
)
def test_garbage_is_invalid_record(codec: CompressionType, garbage: bytes) -> None:
    with pytest.raises(InvalidRecordError):
        decompress(codec, garbage, BOUND)


@pytest.mark.parametrize("codec", [c for c in CompressionType if c is not CompressionType.NONE])
def test_empty_compressed_payload_is_invalid_record(codec: CompressionType) -> None:
    with pytest.raises(InvalidRecordError):
        decompress(codec, b"", BOUND)


def test_trailing_bytes_after_a_frame_are_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        decompress(CompressionType.LZ4, lz4_bytes(b"abc") + b"junk", BOUND)
    with pytest.raises(InvalidRecordError):
        decompress(CompressionType.GZIP, gzip_bytes(b"abc") + b"junk", BOUND)
    with pytest.raises(InvalidRecordError):
        decompress(CompressionType.ZSTD, zstd_streamed(b"abc") + b"junk", BOUND)


def test_corrupted_middle_byte_is_detected() -> None:
    data = bytearray(gzip_bytes(PAYLOAD))
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(InvalidRecordError):
        decompress(CompressionType.GZIP, bytes(data), 10 * len(PAYLOAD))


def test_negative_bound_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        decompress(CompressionType.NONE, b"", -1)


def test_zstd_window_beyond_the_limit_is_too_large_not_corrupt() -> None:
    params = zstandard.ZstdCompressionParameters.from_level(19, window_log=26)
    compressor = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = compressor.compress(b"abc" * 100) + compressor.flush()
    assert zstandard.get_frame_parameters(frame).window_size == 64 * 1024 * 1024
    with pytest.raises(TelemetryTooLargeError, match="window"):
        decompress(CompressionType.ZSTD, frame, BOUND)
    assert decompress(CompressionType.ZSTD, frame, 64 * 1024 * 1024) == b"abc" * 100


GIB = 1024 * 1024 * 1024
RLE_BLOCK = 128 * 1024  # zstd's largest block


def test_hand_made_zstd_frame_is_what_zstd_reads() -> None:
    frame = zstd_declaring(300_000, 300_000)
    assert zstandard.frame_content_size(frame) == 300_000
    assert zstandard.ZstdDecompressor().decompress(frame) == bytes(300_000)
    assert decompress(CompressionType.ZSTD, frame, 300_000) == bytes(300_000)


@pytest.mark.parametrize(
    "produced", [GIB, RLE_BLOCK], ids=["honest-gib", "declares-gib-holds-128k"]
)
def test_zstd_frame_declaring_a_gib_is_refused_before_allocating(produced: int) -> None:
    """python-zstandard sizes its one-shot buffer by the declared size, ignoring max_output_size."""
    frame = zstd_declaring(GIB, produced)
    assert len(frame) < 40 * 1024  # 32 KiB on the wire for the honest one
    tracemalloc.start()
    try:
        with pytest.raises(TelemetryTooLargeError) as info:
            decompress(CompressionType.ZSTD, frame, 16 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.error_code == ErrorCode.TELEMETRY_TOO_LARGE
    assert "declare" in str(info.value)
    assert peak < 1024 * 1024  # the header alone decided


def test_zstd_declared_sizes_add_up_across_frames() -> None:
    frame = zstd_declaring(40 * 1024, 40 * 1024)
    assert decompress(CompressionType.ZSTD, frame + frame, 80 * 1024) == bytes(80 * 1024)
    with pytest.raises(TelemetryTooLargeError, match="declare"):
        decompress(CompressionType.ZSTD, frame + frame, 80 * 1024 - 1)


def test_zstd_frame_declaring_less_than_it_holds_is_corrupt_not_larger() -> None:
    frame = zstd_declaring(1000, 200_000)
    tracemalloc.start()
    try:
        with pytest.raises((InvalidRecordError, TelemetryTooLargeError)):
            decompress(CompressionType.ZSTD, frame, BOUND)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * BOUND + 1024 * 1024


def test_lz4_frame_declaring_more_than_the_bound_is_refused_from_its_header() -> None:
    compressor = lz4.frame.LZ4FrameCompressor()
    parts: list[bytes] = [compressor.begin(source_size=BOMB_SIZE)]
    parts += [compressor.compress(c) for c in zero_chunks(BOMB_SIZE)]
    frame = b"".join(parts) + bytes(compressor.flush())
    assert lz4.frame.get_frame_info(frame)["content_size"] == BOMB_SIZE
    tracemalloc.start()
    try:
        with pytest.raises(TelemetryTooLargeError):
            decompress(CompressionType.LZ4, frame, BOUND)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024  # refused from the header: nothing decompressed
    honest = lz4.frame.compress(PAYLOAD, store_size=True)
    assert decompress(CompressionType.LZ4, honest, len(PAYLOAD)) == PAYLOAD
    with pytest.raises(TelemetryTooLargeError):
        decompress(CompressionType.LZ4, honest, len(PAYLOAD) - 1)


@pytest.mark.parametrize("name", BOMBS)
def test_every_codec_output_is_bounded_in_memory_near_the_bound(name: str) -> None:
    """Bounded by what the codec produces: the peak follows the bound, not the bomb."""
    codec, build = BOMBS[name]
    bomb = build()
    bound = 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(TelemetryTooLargeError):
            decompress(codec, bomb, bound)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(bomb) + 4 * bound + 1024 * 1024


@pytest.mark.parametrize("name", ENCODERS)
def test_sharing_the_gil_gives_the_same_output_and_bounds(name: str) -> None:
    codec, encode = ENCODERS[name]
    data = encode(PAYLOAD)
    assert decompress(codec, data, len(PAYLOAD), share_gil=True) == PAYLOAD
    with pytest.raises(TelemetryTooLargeError):
        decompress(codec, data, len(PAYLOAD) - 1, share_gil=True)


@pytest.mark.parametrize("name", BOMBS)
def test_sharing_the_gil_stops_bombs_at_the_bound(name: str) -> None:
    codec, build = BOMBS[name]
    with pytest.raises(TelemetryTooLargeError):
        decompress(codec, build(), BOUND, share_gil=True)


def test_a_payload_without_its_codec_id_is_recognised_by_its_frame_magic() -> None:
    """What a Kafka 3.7 broker forwards: the client's compressed bytes, no codec id."""
    data = otlp_payload("org.apache.kafka.producer.magic", points=3)
    framed = {
        CompressionType.ZSTD: zstd_stream(data),
        CompressionType.LZ4: lz4.frame.compress(data),
        CompressionType.GZIP: gzip.compress(data, compresslevel=0),
        CompressionType.SNAPPY: xerial_snappy(data),
    }
    for codec, payload in framed.items():
        assert compression_by_magic(payload) is codec
        assert decompress(codec, payload, 1 << 20) == data
    assert compression_by_magic(data) is None  # OTLP MetricsData starts with field 1 (0x0a)
    assert compression_by_magic(bytes(cramjam.snappy.compress_raw(data))) is None
    assert compression_by_magic(b"") is None
