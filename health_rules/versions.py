"""Client software versions: parsing, known-bad ranges, and a range as a regular expression.

How a version reaches kip714: Kafka's ApiVersions request carries the
client's ``ClientSoftwareName`` and ``ClientSoftwareVersion``. librdkafka
itself sends ``librdkafka`` and ``2.10.0``; a wrapper sends its own name and
``<its version>-rdkafka-<librdkafka version>`` (confluent-kafka-python:
``2.16.1-rdkafka-2.16.0``), so librdkafka's version is the part after
``-rdkafka-``. The Java client sends ``apache-kafka-java`` and its version.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable

    from health_rules.model import KnownBad

__all__ = [
    "WRAPPED_RDKAFKA",
    "library_version",
    "parse_version",
    "software_is_known_bad",
    "version_range_regex",
]

Version = tuple[int, int, int]
_VERSION: Final = re.compile(r"(\d{1,6})\.(\d{1,6})\.(\d{1,6})(?:[-+.].*)?")
#: What a librdkafka wrapper puts between its own version and librdkafka's.
WRAPPED_RDKAFKA: Final = "-rdkafka-"
#: The widest range spelled out number by number in a regular expression.
_MAX_SPELLED: Final = 1_000


def parse_version(text: str) -> Version | None:
    """``(major, minor, patch)`` of ``2.10.1`` (a ``-RC1`` or ``+build`` suffix ignored)."""
    match = _VERSION.fullmatch(text)
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3])


def library_version(library: str, name: str | None, version: str | None) -> Version | None:
    """The version of ``library`` a client reporting ``name``/``version`` runs, if it runs it."""
    if not version:
        return None
    if library == "librdkafka":
        if name == "librdkafka":
            return parse_version(version)
        _, wrapped, inner = version.partition(WRAPPED_RDKAFKA)
        return parse_version(inner) if wrapped else None
    return parse_version(version) if name == library else None


def software_is_known_bad(
    name: str | None, version: str | None, known_bad: Iterable[KnownBad]
) -> KnownBad | None:
    """The first known-bad entry the client's software falls in, else ``None``."""
    for entry in known_bad:
        running = library_version(entry.library, name, version)
        if running is not None and _between(running, entry.first, entry.last):
            return entry
    return None


def _between(running: Version, first: str, last: str) -> bool:
    low, high = parse_version(first), parse_version(last)
    return low is not None and high is not None and low <= running <= high


def version_range_regex(first: str, last: str) -> str:
    """A regular expression matching exactly the versions ``first`` to ``last`` (and suffixes).

    For PromQL's fully anchored ``=~``; RE2 syntax (no look-arounds).
    """
    low, high = parse_version(first), parse_version(last)
    if low is None or high is None or low > high:
        raise ValueError(f"not a version range: {first!r} to {last!r}")
    return f"(?:{'|'.join(_range_alternatives(low, high))})(?:[-+.].*)?"


def _range_alternatives(low: Version, high: Version) -> list[str]:
    (l_major, l_minor, l_patch), (h_major, h_minor, h_patch) = low, high
    if l_major == h_major:
        if l_minor == h_minor:
            return [f"{l_major}\\.{l_minor}\\.{_numbers(l_patch, h_patch)}"]
        parts = [f"{l_major}\\.{l_minor}\\.{_numbers(l_patch, None)}"]
        if h_minor - l_minor > 1:
            parts.append(f"{l_major}\\.{_numbers(l_minor + 1, h_minor - 1)}\\.[0-9]+")
        parts.append(f"{h_major}\\.{h_minor}\\.{_numbers(0, h_patch)}")
        return parts
    parts = [
        f"{l_major}\\.{l_minor}\\.{_numbers(l_patch, None)}",
        f"{l_major}\\.{_numbers(l_minor + 1, None)}\\.[0-9]+",
    ]
    if h_major - l_major > 1:
        parts.append(f"{_numbers(l_major + 1, h_major - 1)}\\.[0-9]+\\.[0-9]+")
    if h_minor > 0:
        parts.append(f"{h_major}\\.{_numbers(0, h_minor - 1)}\\.[0-9]+")
    parts.append(f"{h_major}\\.{h_minor}\\.{_numbers(0, h_patch)}")
    return parts


def _numbers(low: int, high: int | None) -> str:
    """A group matching the decimal numbers ``low`` to ``high`` (``None``: no upper end)."""
    if high is None:
        if low == 0:
            return "[0-9]+"
        digits = len(str(low))
        spelled = _numbers(low, 10**digits - 1)
        return f"(?:{spelled[3:-1]}|[0-9]{{{digits + 1},}})"
    if high - low > _MAX_SPELLED:
        raise ValueError(f"a version range over {_MAX_SPELLED} numbers wide: {low} to {high}")
    return "(?:" + "|".join(str(n) for n in range(low, high + 1)) + ")"
