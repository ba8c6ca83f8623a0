"""Kafka's ``Uuid`` (``org.apache.kafka.common.Uuid``) as a Python value type.

KIP-714 identifies a client instance by a Kafka ``Uuid``, and three of its
behaviours leak into the protocol, so they are reproduced bit for bit rather
than borrowed from :mod:`uuid`:

* the string form is URL-safe base64 of the 16 big-endian bytes without
  padding (22 characters), not the hyphenated RFC 4122 form; it is the
  ``client_instance_id`` attribute that subscription ``match`` regexes see;
* ``hashCode`` (``(int)(x >> 32) ^ (int)x`` with ``x = msb ^ lsb``) is XOR-ed
  into the subscription id, so a different broker computes the same id;
* ZERO (0, 0) and ONE (0, 1) are reserved: a push carrying either is refused,
  and the broker never hands them out, nor ids whose string starts with ``-``
  (they would read as command-line options in Kafka's tools).

Python's own hash of the id (what the instance cache's dicts use) is a
different matter: clients choose their ids, and ``hash`` of ints is not
randomised, so ids crafted to collide would turn every cache lookup into a
scan of the colliding entries. It is therefore keyed per process: SipHash
(Python's ``bytes`` hash, itself keyed per process unless ``PYTHONHASHSEED``
pins it) over a random per-process prefix and the 16 id bytes.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

__all__ = ["ONE_UUID", "RESERVED", "ZERO_UUID", "Uuid"]

_U64: Final = (1 << 64) - 1
# Java's URL-safe decoder accepts the 22 significant characters with or
# without the two '=' of padding, and nothing outside the URL-safe alphabet.
_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]{22}(?:==)?")
# Unknown outside this process, so nobody can choose ids that collide in our dicts.
_HASH_PREFIX: Final = os.urandom(16)


@dataclass(frozen=True, slots=True, order=True)
class Uuid:
    """A 128-bit id held as two unsigned 64-bit halves.

    Ordering compares the halves as unsigned numbers, as Kafka's
    ``compareTo`` does with ``Long.compareUnsigned``.
    """

    most_significant_bits: int
    least_significant_bits: int
    # Instance ids are dict keys several times per push: hash once, print once.
    _hash: int = field(init=False, repr=False, compare=False)
    _text: str | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        for half in (self.most_significant_bits, self.least_significant_bits):
            if not 0 <= half <= _U64:
                raise ValueError(f"Uuid half {half} is not an unsigned 64-bit value")
        object.__setattr__(self, "_hash", hash(_HASH_PREFIX + self.to_bytes()))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Uuid:
            return NotImplemented
        assert isinstance(other, Uuid)
        return (
            self._hash == other._hash
            and self.most_significant_bits == other.most_significant_bits
            and self.least_significant_bits == other.least_significant_bits
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Uuid:
        """Build from the 16 bytes of the wire form (two big-endian int64)."""
        if len(data) != 16:
            raise ValueError(f"a Uuid is 16 bytes, got {len(data)}")
        # Once per request: skip the dataclass __init__ (two halves of 8 bytes
        # are always in range) and hash the bytes we already hold.
        uuid = object.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(uuid, "most_significant_bits", int.from_bytes(data[:8], "big"))
        setattr_(uuid, "least_significant_bits", int.from_bytes(data[8:], "big"))
        setattr_(uuid, "_hash", hash(_HASH_PREFIX + bytes(data)))
        setattr_(uuid, "_text", None)
        return uuid

    @classmethod
    def from_signed(cls, msb: int, lsb: int) -> Uuid:
        """Build from Java's signed ``long`` halves, as Kafka's tests write them."""
        return cls(msb & _U64, lsb & _U64)

    @classmethod
    def parse(cls, text: str) -> Uuid:
        """Parse the base64 form (``Uuid.fromString``).

        Raises:
            ValueError: not 22 URL-safe base64 characters (optionally padded).
        """
        if len(text) > 24:
            raise ValueError(f"input string with prefix {text[:24]!r} is too long for a Uuid")
        if _BASE64URL.fullmatch(text) is None:
            raise ValueError(f"input string {text!r} is not a base64url-encoded Uuid")
        return cls.from_bytes(base64.urlsafe_b64decode(text[:22] + "=="))

    @classmethod
    def random(cls, random_bytes: Callable[[int], bytes] = os.urandom) -> Uuid:
        """A version-4 id that Kafka's ``Uuid.randomUuid`` could also return.

        Like Kafka, redraws reserved ids and ids whose string starts with
        ``-``. ``random_bytes`` is injectable so tests can force the redraws.
        """
        while True:
            raw = bytearray(random_bytes(16))
            # java.util.UUID.randomUUID: version 4 in the high nibble of
            # byte 6, IETF variant (10xx) in byte 8.
            raw[6] = (raw[6] & 0x0F) | 0x40
            raw[8] = (raw[8] & 0x3F) | 0x80
            candidate = cls.from_bytes(bytes(raw))
            if candidate not in RESERVED and not str(candidate).startswith("-"):
                return candidate

    def to_bytes(self) -> bytes:
        """The 16-byte wire form."""
        return self.most_significant_bits.to_bytes(8, "big") + self.least_significant_bits.to_bytes(
            8, "big"
        )

    def java_hash_code(self) -> int:
        """Java's ``Uuid.hashCode()`` as a signed int32."""
        x = self.most_significant_bits ^ self.least_significant_bits
        folded = ((x >> 32) ^ x) & 0xFFFFFFFF
        return folded - (1 << 32) if folded & 0x80000000 else folded

    @property
    def is_reserved(self) -> bool:
        """ZERO or ONE (``RESERVED``), by the halves: asked twice per push, no hashing."""
        return self.most_significant_bits == 0 and self.least_significant_bits <= 1

    def __str__(self) -> str:
        text = self._text
        if text is None:
            text = base64.urlsafe_b64encode(self.to_bytes()).rstrip(b"=").decode("ascii")
            object.__setattr__(self, "_text", text)
        return text

    def __repr__(self) -> str:
        return f"Uuid({str(self)!r})"


ZERO_UUID: Final = Uuid(0, 0)
ONE_UUID: Final = Uuid(0, 1)
RESERVED: Final = frozenset({ZERO_UUID, ONE_UUID})
