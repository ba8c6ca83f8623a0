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
from typing import Final, final

__all__ = ["ONE_UUID", "RESERVED", "ZERO_UUID", "Uuid"]

_U64: Final = (1 << 64) - 1
# Java's URL-safe decoder accepts the 22 significant characters with or
# without the two '=' of padding, and nothing outside the URL-safe alphabet.
_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]{22}(?:==)?")
# Unknown outside this process, so nobody can choose ids that collide in our dicts.
_HASH_PREFIX: Final = os.urandom(16)


@final
class Uuid:
    """A 128-bit id held as two unsigned 64-bit halves, which are ``Final``.

    Ordering compares the halves as unsigned numbers, as Kafka's
    ``compareTo`` does with ``Long.compareUnsigned``. A plain class rather
    than a frozen dataclass: the module is compiled, and one id is decoded
    and hashed on every request, which a dataclass's generated methods and
    ``object.__setattr__`` would keep interpreted.
    """

    __slots__ = ("_hash", "_text", "least_significant_bits", "most_significant_bits")

    def __init__(
        self, most_significant_bits: int, least_significant_bits: int, *, _wire: bytes = b""
    ) -> None:
        """``_wire``: the 16 bytes the halves came from, when decoded (then in range)."""
        if not _wire:
            for half in (most_significant_bits, least_significant_bits):
                if not 0 <= half <= _U64:
                    raise ValueError(f"Uuid half {half} is not an unsigned 64-bit value")
            _wire = _to_bytes(most_significant_bits, least_significant_bits)
        self.most_significant_bits: Final = most_significant_bits
        self.least_significant_bits: Final = least_significant_bits
        # Instance ids are dict keys several times per push: hash once, print once.
        self._hash: Final = hash(_HASH_PREFIX + _wire)
        self._text: str | None = None

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Uuid):
            return NotImplemented
        return (
            self._hash == other._hash
            and self.most_significant_bits == other.most_significant_bits
            and self.least_significant_bits == other.least_significant_bits
        )

    def __lt__(self, other: Uuid) -> bool:
        return self._halves() < other._halves()

    def __le__(self, other: Uuid) -> bool:
        return self._halves() <= other._halves()

    def __gt__(self, other: Uuid) -> bool:
        return self._halves() > other._halves()

    def __ge__(self, other: Uuid) -> bool:
        return self._halves() >= other._halves()

    def _halves(self) -> tuple[int, int]:
        return self.most_significant_bits, self.least_significant_bits

    @classmethod
    def from_bytes(cls, data: bytes) -> Uuid:
        """Build from the 16 bytes of the wire form (two big-endian int64)."""
        if len(data) != 16:
            raise ValueError(f"a Uuid is 16 bytes, got {len(data)}")
        wire = bytes(data)
        return Uuid(int.from_bytes(wire[:8], "big"), int.from_bytes(wire[8:], "big"), _wire=wire)

    @classmethod
    def from_signed(cls, msb: int, lsb: int) -> Uuid:
        """Build from Java's signed ``long`` halves, as Kafka's tests write them."""
        return Uuid(msb & _U64, lsb & _U64)

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
        return Uuid.from_bytes(base64.urlsafe_b64decode(text[:22] + "=="))

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
            candidate = Uuid.from_bytes(bytes(raw))
            if not candidate.is_reserved and not str(candidate).startswith("-"):
                return candidate

    def to_bytes(self) -> bytes:
        """The 16-byte wire form."""
        return _to_bytes(self.most_significant_bits, self.least_significant_bits)

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
            self._text = text
        return text

    def __repr__(self) -> str:
        return f"Uuid({str(self)!r})"

    def __reduce__(self) -> tuple[type[Uuid], tuple[int, int]]:
        """Pickled and copied by its halves, as the value type it is."""
        return Uuid, (self.most_significant_bits, self.least_significant_bits)


def _to_bytes(msb: int, lsb: int) -> bytes:
    return msb.to_bytes(8, "big") + lsb.to_bytes(8, "big")


ZERO_UUID: Final = Uuid(0, 0)
ONE_UUID: Final = Uuid(0, 1)
RESERVED: Final = frozenset({ZERO_UUID, ONE_UUID})
