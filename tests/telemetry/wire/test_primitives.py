"""Primitive encodings against known byte vectors, and every way a reader can be lied to."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.wire import MalformedFrameError, Reader, Writer


def _written(write: Callable[[Writer], None]) -> bytes:
    writer = Writer()
    write(writer)
    return writer.getvalue()


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16384, "808001"),
        (2**31 - 1, "ffffffff07"),
        (2**32 - 1, "ffffffff0f"),
    ],
)
def test_unsigned_varint_vectors(value: int, encoded: str) -> None:
    assert _written(lambda w: w.uvarint(value)).hex() == encoded
    reader = Reader(bytes.fromhex(encoded))
    assert reader.uvarint() == value
    assert reader.remaining == 0


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
    ],
)
def test_zigzag_varint_vectors(value: int, encoded: str) -> None:
    assert _written(lambda w: w.varint(value)).hex() == encoded
    assert Reader(bytes.fromhex(encoded)).varint() == value


@pytest.mark.parametrize("encoded", ["8080808010", "ffffffffff01", "808080808000"])
def test_varint_longer_than_32_bits_is_malformed(encoded: str) -> None:
    with pytest.raises(MalformedFrameError):
        Reader(bytes.fromhex(encoded)).uvarint()


def test_fixed_width_integers_are_big_endian() -> None:
    writer = Writer()
    writer.int8(-2)
    writer.int16(0x0102)
    writer.int32(-1)
    writer.int64(0x0102030405060708)
    writer.uint32(0xFFFFFFFE)
    assert writer.getvalue().hex() == "fe0102ffffffff0102030405060708fffffffe"
    reader = Reader(writer.getvalue())
    assert (reader.int8(), reader.int16(), reader.int32(), reader.int64(), reader.uint32()) == (
        -2,
        0x0102,
        -1,
        0x0102030405060708,
        0xFFFFFFFE,
    )
    reader.expect_end()


def test_strings_classic_and_compact() -> None:
    assert _written(lambda w: w.string("ab", compact=False)).hex() == "00026162"
    assert _written(lambda w: w.string("ab", compact=True)).hex() == "036162"
    assert _written(lambda w: w.nullable_string(None, compact=False)).hex() == "ffff"
    assert _written(lambda w: w.nullable_string(None, compact=True)).hex() == "00"
    assert Reader(bytes.fromhex("ffff")).nullable_string(compact=False) is None
    assert Reader(bytes.fromhex("00")).nullable_string(compact=True) is None
    assert Reader(bytes.fromhex("01")).string(compact=True) == ""
    assert Reader(b"\x00\x02" + "é".encode()).string(compact=False) == "é"


def test_bytes_and_arrays_classic_and_compact() -> None:
    assert _written(lambda w: w.bytes_(b"\x00\x01", compact=False)).hex() == "000000020001"
    assert _written(lambda w: w.nullable_bytes(None, compact=False)).hex() == "ffffffff"
    assert _written(lambda w: w.nullable_bytes(None, compact=True)).hex() == "00"
    assert _written(lambda w: w.int32_array([1, -1], compact=True)).hex() == "0300000001ffffffff"
    assert _written(lambda w: w.nullable_array_length(None, compact=False)).hex() == "ffffffff"
    assert Reader(bytes.fromhex("ffffffff")).nullable_array_length(compact=False) is None
    assert Reader(bytes.fromhex("0300000001ffffffff")).int32_array(compact=True) == (1, -1)
    assert Reader(bytes.fromhex("0000000201fe")).int8_array(compact=False) == (1, -2)
    reader = Reader(bytes.fromhex("03 02 61 01"))
    assert reader.array(lambda r: r.string(compact=True), compact=True) == ["a", ""]


def test_uuid_is_sixteen_raw_bytes() -> None:
    value = UUID("8892df0e-16cf-4209-a8dc-a816a5e77f68")
    assert _written(lambda w: w.uuid(value)) == value.bytes
    assert Reader(value.bytes).uuid() == value


def test_unknown_tagged_fields_are_skipped() -> None:
    # Two tags (0 with 3 bytes, 5 with 0 bytes), then an int8 that must still be readable.
    reader = Reader(bytes.fromhex("02 00 03 aabbcc 05 00 7f"))
    reader.tagged_fields()
    assert reader.int8() == 0x7F
    assert _written(Writer.tagged_fields) == b"\x00"


MALFORMED_CASES: list[tuple[str, str, Callable[[Reader], object]]] = [
    ("empty int32", "", Reader.int32),
    ("short int64", "01020304", Reader.int64),
    ("short uuid", "00" * 15, Reader.uuid),
    ("no boolean", "", Reader.boolean),
    ("truncated varint", "80", Reader.uvarint),
    ("string longer than frame", "0005616263", lambda r: r.string(compact=False)),
    ("negative string length", "fffe", lambda r: r.nullable_string(compact=False)),
    ("null non-nullable string", "ffff", lambda r: r.string(compact=False)),
    ("null non-nullable compact string", "00", lambda r: r.string(compact=True)),
    ("invalid utf-8", "0002c328", lambda r: r.string(compact=False)),
    ("invalid utf-8 compact", "03fffe", lambda r: r.string(compact=True)),
    ("bytes longer than frame", "7fffffff00", lambda r: r.bytes_(compact=False)),
    ("negative bytes length", "80000000", lambda r: r.nullable_bytes(compact=False)),
    ("null non-nullable bytes", "00", lambda r: r.bytes_(compact=True)),
    ("huge compact bytes", "ffffffff0f00", lambda r: r.bytes_(compact=True)),
    ("array count above bytes left", "7fffffff", lambda r: r.array_length(compact=False)),
    ("null non-nullable array", "ffffffff", lambda r: r.array_length(compact=False)),
    ("int32 array short", "0300000001", lambda r: r.int32_array(compact=True)),
    ("tag count above bytes left", "05 00 00", Reader.tagged_fields),
    ("tag size overruns", "01 00 05 aa", Reader.tagged_fields),
    ("trailing bytes", "00", Reader.expect_end),
]


@pytest.mark.parametrize(
    ("hex_data", "read"), [c[1:] for c in MALFORMED_CASES], ids=[c[0] for c in MALFORMED_CASES]
)
def test_lies_and_truncations_raise_malformed(
    hex_data: str, read: Callable[[Reader], object]
) -> None:
    with pytest.raises(MalformedFrameError):
        read(Reader(bytes.fromhex(hex_data)))


@pytest.mark.parametrize(
    "write",
    [
        lambda w: w.int8(128),
        lambda w: w.int16(-(2**15) - 1),
        lambda w: w.int32(2**31),
        lambda w: w.uvarint(-1),
        lambda w: w.uvarint(2**32),
        lambda w: w.varint(2**31),
        lambda w: w.string("x" * 40000, compact=False),
        lambda w: w.int8_array([200], compact=True),
    ],
)
def test_writer_refuses_values_that_do_not_fit(write: Callable[[Writer], None]) -> None:
    with pytest.raises(ValueError, match=r".") as info:
        write(Writer())
    assert not isinstance(info.value, MalformedFrameError)


_READS: list[Callable[[Reader], object]] = [
    Reader.int8,
    Reader.int16,
    Reader.int32,
    Reader.int64,
    Reader.uint32,
    Reader.boolean,
    Reader.uuid,
    Reader.uvarint,
    Reader.varint,
    Reader.tagged_fields,
    lambda r: r.nullable_string(compact=False),
    lambda r: r.nullable_string(compact=True),
    lambda r: r.nullable_bytes(compact=False),
    lambda r: r.nullable_bytes(compact=True),
    lambda r: r.nullable_array(lambda x: x.string(compact=True), compact=True),
    lambda r: r.int8_array(compact=False),
    lambda r: r.int32_array(compact=True),
]


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=24), reads=st.lists(st.sampled_from(_READS), max_size=6))
def test_arbitrary_reads_raise_only_malformed(
    data: bytes, reads: list[Callable[[Reader], object]]
) -> None:
    reader = Reader(data)
    try:
        for read in reads:
            read(reader)
    except MalformedFrameError:
        return
    assert 0 <= reader.pos <= len(data)


@settings(max_examples=100, deadline=None)
@given(
    number=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    unsigned=st.integers(min_value=0, max_value=2**32 - 1),
    text=st.one_of(st.none(), st.text(max_size=20)),
    blob=st.one_of(st.none(), st.binary(max_size=40)),
    flag=st.booleans(),
    compact=st.booleans(),
)
def test_round_trip(
    number: int, unsigned: int, text: str | None, blob: bytes | None, flag: bool, compact: bool
) -> None:
    writer = Writer()
    writer.varint(number)
    writer.uvarint(unsigned)
    writer.int32(number)
    writer.nullable_string(text, compact)
    writer.nullable_bytes(blob, compact)
    writer.boolean(flag)
    writer.tagged_fields()
    reader = Reader(writer.getvalue())
    assert reader.varint() == number
    assert reader.uvarint() == unsigned
    assert reader.int32() == number
    assert reader.nullable_string(compact) == text
    assert reader.nullable_bytes(compact) == blob
    assert reader.boolean() is flag
    reader.tagged_fields()
    reader.expect_end()
