"""Kafka ``Uuid`` semantics; expected strings and hash codes printed by JDK 17."""

from __future__ import annotations

import copy
import itertools
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.core.client_uuid import ONE_UUID, RESERVED, ZERO_UUID, Uuid

u64 = st.integers(min_value=0, max_value=2**64 - 1)


def test_to_string_is_url_safe_base64_without_padding() -> None:
    assert str(Uuid(1, 2)) == "AAAAAAAAAAEAAAAAAAAAAg"
    assert str(Uuid.from_signed(-1, -2)) == "_____________________g"
    assert str(Uuid(0x0123456789ABCDEF, 0x7766554433221100)) == "ASNFZ4mrze93ZlVEMyIRAA"
    assert str(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_java_hash_code() -> None:
    assert Uuid(1, 2).java_hash_code() == 3
    assert Uuid.from_signed(-1, -2).java_hash_code() == 1
    assert Uuid(0x0123456789ABCDEF, 0x7766554433221100).java_hash_code() == -858993460


@given(u64, u64)
@settings(max_examples=200)
def test_string_round_trip(msb: int, lsb: int) -> None:
    uuid = Uuid(msb, lsb)
    text = str(uuid)
    assert len(text) == 22
    assert Uuid.parse(text) == uuid
    assert Uuid.parse(text + "==") == uuid
    assert Uuid.from_bytes(uuid.to_bytes()) == uuid


@given(u64, u64)
@settings(max_examples=200)
def test_hash_code_is_int32_fold_of_xor(msb: int, lsb: int) -> None:
    x = msb ^ lsb
    expected = ((x >> 32) ^ x) & 0xFFFFFFFF
    expected -= (1 << 32) if expected >= 1 << 31 else 0
    assert Uuid(msb, lsb).java_hash_code() == expected
    assert -(2**31) <= expected < 2**31


@pytest.mark.parametrize(
    "text",
    [
        "",
        "AAAAAAAAAAEAAAAAAAAAA",  # 21 chars
        "AAAAAAAAAAEAAAAAAAAAAgAA",  # 24 chars, 18 bytes
        "AAAAAAAAAAEAAAAAAAAAAg=",
        "AAAAAAAAAAEAAAAAAAAA+g",  # standard alphabet, not URL-safe
        "AAAAAAAAAAEAAAAAAAAAAgAAAAAA",  # too long
        "AAAAAAAAAA EAAAAAAAAAg",
    ],
)
def test_parse_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="Uuid"):
        Uuid.parse(text)


def test_halves_must_be_unsigned_64_bit() -> None:
    with pytest.raises(ValueError, match="64-bit"):
        Uuid(-1, 0)
    with pytest.raises(ValueError, match="64-bit"):
        Uuid(0, 2**64)
    with pytest.raises(ValueError, match="16 bytes"):
        Uuid.from_bytes(b"\x00" * 15)


def test_reserved_ids() -> None:
    assert {Uuid(0, 0), Uuid(0, 1)} == RESERVED
    assert ZERO_UUID.is_reserved
    assert ONE_UUID.is_reserved
    assert not Uuid(0, 2).is_reserved


def test_ordering_is_unsigned_like_compare_to() -> None:
    small, large = Uuid(1, 0), Uuid.from_signed(-1, 0)
    assert small < large
    assert Uuid(1, 1) < Uuid(1, 2)


def test_random_is_version_4_ietf_variant() -> None:
    for _ in range(50):
        uuid = Uuid.random()
        raw = uuid.to_bytes()
        assert raw[6] >> 4 == 4
        assert raw[8] >> 6 == 0b10
        assert not uuid.is_reserved
        assert not str(uuid).startswith("-")


def test_random_redraws_ids_whose_string_starts_with_dash() -> None:
    # 0xF8 in the first byte gives the base64 index 62, which is '-'.
    draws = iter([b"\xf8" + b"\x00" * 15, b"\x01" + b"\x00" * 15])
    calls = itertools.count()

    def fake_random(n: int) -> bytes:
        next(calls)
        return next(draws)

    uuid = Uuid.random(fake_random)
    assert next(calls) == 2
    assert str(uuid).startswith("A")


def test_random_never_returns_reserved_even_when_forced() -> None:
    # Version/variant bits make ZERO and ONE unreachable; a fake source
    # returning zeros still yields a non-reserved id.
    uuid = Uuid.random(lambda n: b"\x00" * n)
    assert uuid not in RESERVED
    assert uuid.to_bytes()[6] == 0x40


@pytest.mark.parametrize(
    ("msb", "lsb"), [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2**64 - 1, 0), (0, 2**64 - 1)]
)
def test_is_reserved_by_the_halves_is_membership_of_reserved(msb: int, lsb: int) -> None:
    uuid = Uuid(msb, lsb)
    assert uuid.is_reserved == (uuid in RESERVED)


def test_copies_and_pickles_are_equal_and_hash_alike() -> None:
    uuid = Uuid.from_signed(-1, 42)
    for twin in (copy.copy(uuid), copy.deepcopy(uuid), pickle.loads(pickle.dumps(uuid))):
        assert twin == uuid
        assert hash(twin) == hash(uuid)
        assert str(twin) == str(uuid)
