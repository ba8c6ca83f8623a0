"""Static TOML subscriptions are the base; dynamic (admin API) keys override them, key by key.

For each subscription name and each key (``metrics``, ``interval.ms``,
``match``) the value in force is, in order of precedence:

1. the dynamic value stored in the metadata store (ConfigSource 7,
   CLIENT_METRICS_CONFIG: what ``kafka-configs.sh --describe`` shows);
2. the value from the config file's ``[subscriptions.NAME]`` (ConfigSource 4,
   STATIC_BROKER_CONFIG; a static subscription states all three keys);
3. Kafka's default (ConfigSource 5, DEFAULT_CONFIG): ``""``, ``300000``, ``""``.

Deleting a dynamic key therefore reverts it to the file's value, not to
the default, and a subscription defined in the file can be changed but not
removed through the admin API: that takes an edit of the file. Describe
follows Kafka 4.0 (KAFKA-17516): every key, its value in force and its
source; with synonyms, every layer that sets the key, highest first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from telemetry.core.subscriptions import (
    DEFAULT_INTERVAL_MS,
    INTERVAL_MS_CONFIG,
    MATCH_CONFIG,
    METRICS_CONFIG,
    validate_subscription,
)
from telemetry.errors import ErrorCode
from telemetry.wire.config_messages import (
    ConfigSource,
    ConfigType,
    DescribeConfigsEntry,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from telemetry.core.subscriptions import Subscription

CLIENT_METRICS_KEYS: Final = (METRICS_CONFIG, INTERVAL_MS_CONFIG, MATCH_CONFIG)
_DEFAULTS: Final = {
    METRICS_CONFIG: "",
    INTERVAL_MS_CONFIG: str(DEFAULT_INTERVAL_MS),
    MATCH_CONFIG: "",
}
_TYPES: Final = {
    METRICS_CONFIG: ConfigType.LIST,
    INTERVAL_MS_CONFIG: ConfigType.INT,
    MATCH_CONFIG: ConfigType.LIST,
}
EMPTY_NAME_MESSAGE: Final = "Client metrics subscription name must not be empty"


def static_config(subscription: Subscription) -> dict[str, str]:
    """A static subscription's keys as Kafka renders LIST and INT values (comma-joined)."""
    return {
        METRICS_CONFIG: ",".join(subscription.metrics),
        INTERVAL_MS_CONFIG: str(subscription.interval_ms),
        MATCH_CONFIG: ",".join(f"{key}={p.pattern}" for key, p in subscription.match.items()),
    }


def merge_subscriptions(
    static: Iterable[Subscription], dynamic: Mapping[str, Mapping[str, str]]
) -> tuple[Subscription, ...]:
    """The subscriptions in force: file subscriptions first, in file order, then
    the names only the admin API defined, sorted.

    Raises:
        InvalidRequestError, InvalidConfigError: a dynamic value that does not
            validate (the alteration path validates before storing, so only a
            store written by something else gets here).
    """
    merged: list[Subscription] = []
    static_names = set()
    for subscription in static:
        static_names.add(subscription.name)
        overrides = dynamic.get(subscription.name, {})
        if not overrides:
            merged.append(subscription)
            continue
        config = {**static_config(subscription), **overrides}
        result = validate_subscription(subscription.name, config)
        if result is not None:
            merged.append(result)
    for name in sorted(set(dynamic) - static_names):
        result = validate_subscription(name, dynamic[name])
        if result is not None:
            merged.append(result)
    return tuple(merged)


def client_metrics_names(
    static: Iterable[Subscription], dynamic: Mapping[str, Mapping[str, str]]
) -> tuple[str, ...]:
    """Every name DescribeConfigs can describe, for ListConfigResources (74):
    the 4.x tools check the list before they describe."""
    return tuple(sorted({s.name for s in static} | {n for n, keys in dynamic.items() if keys}))


def describe_client_metrics(
    name: str,
    static: Subscription | None,
    dynamic: Mapping[str, str] | None,
    *,
    configuration_keys: Sequence[str] | None = None,
    include_synonyms: bool = False,
) -> DescribeConfigsResult:
    """The DescribeConfigs result for client-metrics resource ``name``.

    ``configuration_keys`` None or empty means every key; unknown keys are
    skipped. An unknown name answers the three defaults with no error, as
    Kafka 4.0 does.
    """
    if not name:
        return DescribeConfigsResult(
            resource_type=16,
            resource_name=name,
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=EMPTY_NAME_MESSAGE,
        )
    layers: list[tuple[Mapping[str, str], ConfigSource]] = []
    if dynamic:
        layers.append((dynamic, ConfigSource.CLIENT_METRICS_CONFIG))
    if static is not None:
        layers.append((static_config(static), ConfigSource.STATIC_BROKER_CONFIG))
    wanted = configuration_keys or CLIENT_METRICS_KEYS
    entries = []
    for key in CLIENT_METRICS_KEYS:
        if key not in wanted:
            continue
        setting = [(layer[key], source) for layer, source in layers if key in layer]
        value, source = setting[0] if setting else (_DEFAULTS[key], ConfigSource.DEFAULT_CONFIG)
        synonyms = (
            tuple(DescribeConfigsSynonym(name=key, value=v, source=s) for v, s in setting)
            if include_synonyms
            else ()
        )
        entries.append(
            DescribeConfigsEntry(
                name=key,
                value=value,
                config_source=source,
                synonyms=synonyms,
                config_type=_TYPES[key],
            )
        )
    return DescribeConfigsResult(resource_type=16, resource_name=name, configs=tuple(entries))
