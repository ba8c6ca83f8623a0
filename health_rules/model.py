"""What a health rule is, and the strict parser of a rules file.

Every mistake in a rules file is refused with the rule and key it concerns:
an operator replacing the shipped file (``[alerts] rules``) learns at once,
not when an alert that should fire stays silent.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

from health_rules.versions import parse_version

__all__ = [
    "AGGREGATIONS",
    "DERIVED_METRICS",
    "OPERATORS",
    "SEVERITIES",
    "KnownBad",
    "Rule",
    "RuleSet",
    "RulesError",
    "load_rules",
    "parse_rules",
]

#: How a rule reduces the metric over its ``for_s`` window (``last``: the newest value).
AGGREGATIONS: Final = ("max", "min", "avg", "last")
OPERATORS: Final = (">", ">=", "<", "<=", "==", "!=")
SEVERITIES: Final = ("info", "warning", "critical")
#: kip714's own per-instance measures (see ``rules.toml``), not pushed by clients.
DERIVED_METRICS: Final = ("kip714.client.push_age_intervals", "kip714.client.software_known_bad")
#: A metric name or pattern: OTLP name characters, ``*`` for any run of them.
_METRIC: Final = re.compile(r"[A-Za-z0-9_.\-/*]+")
_NAME: Final = re.compile(r"[a-z][a-z0-9_]*")
_RULE_KEYS: Final = frozenset(
    {"name", "metric", "aggregation", "op", "threshold", "for_s", "severity", "meaning"}
)
_KNOWN_BAD_KEYS: Final = frozenset({"library", "first", "last", "reason"})
#: Libraries a known-bad entry may name (how their versions reach kip714 differs).
LIBRARIES: Final = ("librdkafka", "apache-kafka-java")
#: Longest window a rule may take (a day): the lake evaluates it per hour.
MAX_FOR_S: Final = 86_400


class RulesError(ValueError):
    """A rules file that cannot be used; the message names the rule and key."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One condition on one metric, fired per series (client instance and attributes)."""

    name: str
    metric: str
    aggregation: str
    op: str
    threshold: float
    for_s: int
    severity: str
    meaning: str

    def holds(self, value: float) -> bool:
        """Whether ``value`` (the aggregation over the window) fires the rule."""
        match self.op:
            case ">":
                return value > self.threshold
            case ">=":
                return value >= self.threshold
            case "<":
                return value < self.threshold
            case "<=":
                return value <= self.threshold
            case "==":
                return value == self.threshold
            case _:
                return value != self.threshold


@dataclass(frozen=True, slots=True)
class KnownBad:
    """Versions ``first`` to ``last`` (inclusive) of ``library`` have the defect ``reason``."""

    library: str
    first: str
    last: str
    reason: str


@dataclass(frozen=True, slots=True)
class RuleSet:
    rules: tuple[Rule, ...]
    known_bad: tuple[KnownBad, ...]
    source: str

    def rule(self, name: str) -> Rule:
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)


def load_rules(path: Path | None = None) -> RuleSet:
    """The rules in ``path``, or the shipped ones; ``RulesError`` for an unusable file.

    The shipped file is read as a package resource, so it is found in a
    zip too (the ``--py-files`` archive a Spark cluster imports from).
    """
    source = path if path is not None else resources.files("health_rules") / "rules.toml"
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RulesError(f"{source}: cannot read the rules: {error}") from None
    return parse_rules(text, str(path) if path is not None else "health_rules/rules.toml")


def parse_rules(text: str, source: str = "<rules>") -> RuleSet:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RulesError(f"{source}: not TOML: {error}") from None
    unknown = sorted(set(document) - {"rule", "known_bad"})
    if unknown:
        raise RulesError(
            f"{source}: unknown table {unknown[0]!r} (expected [[rule]], [[known_bad]])"
        )
    rules = tuple(
        _rule(entry, f"{source}: [[rule]] #{index + 1}")
        for index, entry in enumerate(_tables(document, "rule", source))
    )
    if not rules:
        raise RulesError(f"{source}: no [[rule]]")
    seen: set[str] = set()
    for rule in rules:
        if rule.name in seen:
            raise RulesError(f"{source}: two rules are named {rule.name!r}")
        seen.add(rule.name)
    known_bad = tuple(
        _known_bad(entry, f"{source}: [[known_bad]] #{index + 1}")
        for index, entry in enumerate(_tables(document, "known_bad", source))
    )
    return RuleSet(rules, known_bad, source)


def _tables(document: dict[str, Any], key: str, source: str) -> list[dict[str, Any]]:
    entries = document.get(key, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise RulesError(f"{source}: {key!r} must be an array of tables ([[{key}]])")
    return entries


def _rule(entry: dict[str, Any], where: str) -> Rule:
    _check_keys(entry, _RULE_KEYS, where)
    name = _string(entry, "name", where)
    where = f"{where} ({name})"
    if not _NAME.fullmatch(name):
        raise RulesError(f"{where}: 'name' must be lower case letters, digits and '_'")
    metric = _string(entry, "metric", where)
    if not _METRIC.fullmatch(metric) or metric.strip("*.") == "":
        raise RulesError(f"{where}: 'metric' is not a metric name or '*' pattern: {metric!r}")
    if metric.startswith("kip714.") and metric not in DERIVED_METRICS:
        raise RulesError(
            f"{where}: 'metric' {metric!r} is not one of kip714's own: {', '.join(DERIVED_METRICS)}"
        )
    aggregation = _choice(entry, "aggregation", AGGREGATIONS, where)
    if metric in DERIVED_METRICS and (aggregation != "last" or entry.get("for_s") != 0):
        raise RulesError(f'{where}: {metric!r} takes aggregation = "last" and for_s = 0')
    op = _choice(entry, "op", OPERATORS, where)
    threshold = entry["threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise RulesError(f"{where}: 'threshold' must be a number")
    if not math.isfinite(threshold):
        raise RulesError(f"{where}: 'threshold' must be finite")
    for_s = entry["for_s"]
    if isinstance(for_s, bool) or not isinstance(for_s, int) or not 0 <= for_s <= MAX_FOR_S:
        raise RulesError(f"{where}: 'for_s' must be whole seconds from 0 to {MAX_FOR_S}")
    if aggregation != "last" and for_s == 0:
        raise RulesError(f"{where}: aggregation {aggregation!r} needs a window ('for_s' > 0)")
    severity = _choice(entry, "severity", SEVERITIES, where)
    meaning = _string(entry, "meaning", where)
    if "\n" in meaning:
        raise RulesError(f"{where}: 'meaning' must be one line")
    return Rule(name, metric, aggregation, op, float(threshold), for_s, severity, meaning)


def _known_bad(entry: dict[str, Any], where: str) -> KnownBad:
    _check_keys(entry, _KNOWN_BAD_KEYS, where)
    library = _choice(entry, "library", LIBRARIES, where)
    first, last = _string(entry, "first", where), _string(entry, "last", where)
    for key, version in (("first", first), ("last", last)):
        if parse_version(version) is None:
            raise RulesError(f"{where}: {key!r} must be a version like 2.10.1: {version!r}")
    if parse_version(first) > parse_version(last):  # type: ignore[operator]
        raise RulesError(f"{where}: 'first' {first} is after 'last' {last}")
    return KnownBad(library, first, last, _string(entry, "reason", where))


def _check_keys(entry: dict[str, Any], keys: frozenset[str], where: str) -> None:
    unknown = sorted(set(entry) - keys)
    if unknown:
        raise RulesError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(keys))})")
    missing = sorted(keys - set(entry))
    if missing:
        raise RulesError(f"{where}: missing key {missing[0]!r}")


def _string(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry[key]
    if not isinstance(value, str) or not value.strip():
        raise RulesError(f"{where}: {key!r} must be a non-empty string")
    return value


def _choice(entry: dict[str, Any], key: str, choices: tuple[str, ...], where: str) -> str:
    value = _string(entry, key, where)
    if value not in choices:
        raise RulesError(f"{where}: {key!r} must be one of {', '.join(choices)}: {value!r}")
    return value
