"""KIP-714 client-metrics subscriptions: validation, the registry, and evaluation.

This is Kafka's ``ClientMetricsConfigs`` (keys ``metrics``, ``interval.ms``,
``match``) and the subscription half of ``ClientMetricsManager``. The error
codes are part of the contract because the admin API and the config loader
surface them: a malformed request (empty name, unknown key, interval out of
range) is INVALID_REQUEST (42), a value that does not parse or a bad match
pattern is INVALID_CONFIG (40), as Kafka answers (KAFKA-17525).

Match regexes use Python's :mod:`re` with ``fullmatch``: Kafka matches the
whole attribute (``Matcher.matches()``), never a substring. Kafka is moving
to RE2/J syntax; patterns that only Java's engine accepts (possessive
quantifiers, for one) are refused here as INVALID_CONFIG.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from telemetry.core.client_instance import ClientInstanceMetadata
from telemetry.core.subscription_id import JavaConcurrentHashMapKeys, java_hash_set_order
from telemetry.errors import InvalidConfigError, InvalidRequestError

__all__ = [
    "ALLOWED_MATCH_KEYS",
    "ALL_METRICS",
    "DEFAULT_INTERVAL_MS",
    "INTERVAL_MS_CONFIG",
    "MATCH_CONFIG",
    "MAX_INTERVAL_MS",
    "METRICS_CONFIG",
    "MIN_INTERVAL_MS",
    "Subscription",
    "SubscriptionEvaluation",
    "SubscriptionRegistry",
    "parse_list",
    "parse_match_patterns",
    "validate_subscription",
]

METRICS_CONFIG: Final = "metrics"
INTERVAL_MS_CONFIG: Final = "interval.ms"
MATCH_CONFIG: Final = "match"
_CONFIG_NAMES: Final = (METRICS_CONFIG, INTERVAL_MS_CONFIG, MATCH_CONFIG)

ALL_METRICS: Final = "*"
DEFAULT_INTERVAL_MS: Final = 300_000
MIN_INTERVAL_MS: Final = 100
MAX_INTERVAL_MS: Final = 3_600_000

ALLOWED_MATCH_KEYS: Final = frozenset(
    {
        "client_instance_id",
        "client_id",
        "client_software_name",
        "client_software_version",
        "client_source_address",
        "client_source_port",
    }
)

# ConfigDef.COMMA_WITH_WHITESPACE; Java's \s is ASCII-only.
_COMMA_WITH_WHITESPACE: Final = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")
_JAVA_INT: Final = re.compile(r"[+-]?[0-9]+")
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1


def _java_trim(text: str) -> str:
    """``String.trim()``: strips code points up to U+0020, not Unicode spaces."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def parse_list(name: str, value: object) -> list[str]:
    """Kafka's LIST type: ``"a, b"`` → ``[a, b]``, a blank string → ``[]``.

    Splitting keeps empty items (``"a,,b"`` → ``[a, "", b]``), as Java's
    ``split(regex, -1)`` does. A list of strings (TOML array) is taken as is.

    Raises:
        InvalidConfigError: neither a string nor a list of strings.
    """
    if isinstance(value, str):
        trimmed = _java_trim(value)
        return [] if not trimmed else _COMMA_WITH_WHITESPACE.split(trimmed)
    if isinstance(value, Sequence) and all(isinstance(item, str) for item in value):
        return [str(item) for item in value]
    raise InvalidConfigError(
        f"Invalid value {value!r} for configuration {name}: Expected a comma separated list."
    )


def _parse_int(name: str, value: object) -> int:
    """Kafka's INT type: an int32, or a string ``Integer.parseInt`` accepts."""
    parsed: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        parsed = value
    elif isinstance(value, str) and _JAVA_INT.fullmatch(_java_trim(value)):
        parsed = int(_java_trim(value))
    if parsed is None or not _INT32_MIN <= parsed <= _INT32_MAX:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: Not a number of type INT"
        )
    return parsed


def _reject_duplicates(name: str, values: list[str]) -> None:
    # Newer Kafka validates metrics and match with
    # ValidList.anyNonDuplicateValues(true, false): duplicates are a config error.
    if len(set(values)) != len(values):
        raise InvalidConfigError(
            f"Invalid value {values} for configuration {name}: values must not be duplicated"
        )


def parse_match_patterns(patterns: Sequence[str]) -> dict[str, re.Pattern[str]]:
    """Parse ``key=regex`` selectors into compiled, whole-string patterns.

    KAFKA-21041: only the first ``=`` separates key from regex, so
    ``client_id=a=b`` selects client ids equal to ``a=b`` and ``client_id=``
    selects the empty client id. A repeated key keeps the last regex (Kafka
    puts them into a HashMap).

    Raises:
        InvalidConfigError: no ``=``, a key outside :data:`ALLOWED_MATCH_KEYS`,
            or a regex that does not compile.
    """
    parsed: dict[str, re.Pattern[str]] = {}
    for entry in patterns:
        key, separator, regex = entry.partition("=")
        key = _java_trim(key)
        if not separator or key not in ALLOWED_MATCH_KEYS:
            raise InvalidConfigError(f"Illegal client matching pattern: {entry}")
        try:
            parsed[key] = re.compile(_java_trim(regex))
        except re.error as error:
            raise InvalidConfigError(f"Illegal client matching pattern: {entry}") from error
    return parsed


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """One named subscription, already validated.

    ``metrics`` keeps the configured order: the order Java would iterate the
    subscription's own HashSet (needed for the subscription id) derives from it.
    """

    name: str
    metrics: tuple[str, ...] = ()
    interval_ms: int = DEFAULT_INTERVAL_MS
    match: Mapping[str, re.Pattern[str]] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidRequestError("Subscription name can't be empty")
        if not MIN_INTERVAL_MS <= self.interval_ms <= MAX_INTERVAL_MS:
            raise InvalidRequestError(
                f"Invalid value {self.interval_ms} for {INTERVAL_MS_CONFIG}, interval must be "
                f"between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)"
            )
        unknown = set(self.match) - ALLOWED_MATCH_KEYS
        if unknown:
            raise InvalidConfigError(f"Illegal client matching pattern keys: {sorted(unknown)}")
        object.__setattr__(self, "match", MappingProxyType(dict(self.match)))

    @property
    def all_metrics(self) -> bool:
        return ALL_METRICS in self.metrics

    def matches(self, metadata: ClientInstanceMetadata) -> bool:
        return metadata.is_match(self.match)


def validate_subscription(name: str, properties: Mapping[str, object]) -> Subscription | None:
    """Validate in Kafka's order and build the subscription.

    Returns ``None`` for empty properties, which Kafka's
    ``updateSubscription`` reads as "delete this subscription".

    Raises:
        InvalidRequestError: empty name, unknown key, interval out of range.
        InvalidConfigError: a value that does not parse, a bad match pattern,
            duplicated list entries.
    """
    if not name:
        raise InvalidRequestError("Subscription name can't be empty")
    for key in properties:
        if key not in _CONFIG_NAMES:
            raise InvalidRequestError(f"Unknown client metrics configuration: {key}")
    if not properties:
        return None
    metrics = parse_list(METRICS_CONFIG, properties.get(METRICS_CONFIG, []))
    interval_ms = _parse_int(
        INTERVAL_MS_CONFIG, properties.get(INTERVAL_MS_CONFIG, DEFAULT_INTERVAL_MS)
    )
    match = parse_list(MATCH_CONFIG, properties.get(MATCH_CONFIG, []))
    _reject_duplicates(METRICS_CONFIG, metrics)
    _reject_duplicates(MATCH_CONFIG, match)
    if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
        raise InvalidRequestError(
            f"Invalid value {interval_ms} for {INTERVAL_MS_CONFIG}, interval must be "
            f"between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)"
        )
    return Subscription(
        name=name,
        metrics=tuple(metrics),
        interval_ms=interval_ms,
        match=parse_match_patterns(match),
    )


@dataclass(frozen=True, slots=True)
class SubscriptionEvaluation:
    """What one client instance is subscribed to.

    ``metrics`` is in Java HashSet iteration order, the order Kafka returns
    in ``RequestedMetrics`` and hashes into the subscription id.
    """

    metrics: tuple[str, ...]
    push_interval_ms: int


class SubscriptionRegistry:
    """The subscriptions in force, with Kafka's update-version counter.

    The version lets each client instance notice, on its next request, that
    the subscriptions changed since it was evaluated (Kafka's
    ``subscriptionUpdateVersion``). It moves on every non-empty update, even
    an identical one, and on the removal of an existing subscription.
    """

    __slots__ = ("_order", "_subscriptions", "_version")

    def __init__(self) -> None:
        self._subscriptions: dict[str, Subscription] = {}
        self._order = JavaConcurrentHashMapKeys()
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def update(self, name: str, properties: Mapping[str, object]) -> None:
        """Create, replace or (with empty properties) remove a subscription."""
        subscription = validate_subscription(name, properties)
        if subscription is None:
            if name in self._subscriptions:
                del self._subscriptions[name]
                self._order.remove(name)
                self._version += 1
            return
        self.put(subscription)

    def put(self, subscription: Subscription) -> None:
        """Install an already-built subscription (config loader, tests)."""
        self._subscriptions[subscription.name] = subscription
        self._order.put(subscription.name)
        self._version += 1

    def get(self, name: str) -> Subscription | None:
        return self._subscriptions.get(name)

    def __iter__(self) -> Iterator[Subscription]:
        """In Kafka's ConcurrentHashMap order, which the union depends on."""
        for name in self._order:
            yield self._subscriptions[name]

    def __len__(self) -> int:
        return len(self._subscriptions)

    def evaluate(self, metadata: ClientInstanceMetadata) -> SubscriptionEvaluation:
        """Union the matching subscriptions, as Kafka's ``createClientInstance``.

        ``*`` in any matching subscription collapses the set to ``{"*"}``. The
        interval is the minimum over matching subscriptions *starting from
        300000*: a Kafka quirk kept on purpose, so a subscription asking for
        more than 5 minutes still gets 5 minutes, and a client no subscription
        matches is told 300000 with no metrics (it re-GETs every 5 minutes).
        """
        interval_ms = DEFAULT_INTERVAL_MS
        collected: list[str] = []
        all_metrics = False
        for subscription in self:
            if subscription.matches(metadata):
                all_metrics = all_metrics or subscription.all_metrics
                collected.extend(
                    java_hash_set_order(subscription.metrics, presized_from_collection=True)
                )
                interval_ms = min(interval_ms, subscription.interval_ms)
        metrics = (ALL_METRICS,) if all_metrics else tuple(java_hash_set_order(collected))
        return SubscriptionEvaluation(metrics=metrics, push_interval_ms=interval_ms)
