"""Static TOML subscriptions as the base, dynamic keys over them, and describe showing
which layer each value comes from."""

from __future__ import annotations

from telemetry.admin.precedence import (
    client_metrics_names,
    describe_client_metrics,
    merge_subscriptions,
    static_config,
)
from telemetry.core.subscriptions import Subscription, parse_match_patterns, validate_subscription
from telemetry.wire.config_messages import ConfigSource, DescribeConfigsSynonym

STATIC = Subscription(
    name="producers",
    metrics=("org.apache.kafka.producer.",),
    interval_ms=60_000,
    match=parse_match_patterns(["client_software_name=confluent-kafka-.*"]),
)


def test_static_config_renders_kafka_strings() -> None:
    assert static_config(STATIC) == {
        "metrics": "org.apache.kafka.producer.",
        "interval.ms": "60000",
        "match": "client_software_name=confluent-kafka-.*",
    }
    assert validate_subscription(STATIC.name, static_config(STATIC)) == STATIC


def test_dynamic_keys_override_static_ones_key_by_key() -> None:
    (merged,) = merge_subscriptions([STATIC], {"producers": {"interval.ms": "1000"}})
    assert merged.interval_ms == 1000
    assert merged.metrics == STATIC.metrics
    assert {k: p.pattern for k, p in merged.match.items()} == {
        "client_software_name": "confluent-kafka-.*"
    }


def test_without_dynamic_keys_the_static_subscription_stands() -> None:
    assert merge_subscriptions([STATIC], {}) == (STATIC,)
    assert merge_subscriptions([STATIC], {"producers": {}}) == (STATIC,)


def test_dynamic_only_subscriptions_follow_in_name_order() -> None:
    merged = merge_subscriptions(
        [STATIC], {"zeta": {"metrics": "*"}, "alpha": {"interval.ms": "500"}}
    )
    assert [s.name for s in merged] == ["producers", "alpha", "zeta"]
    assert merged[1].interval_ms == 500
    assert merged[1].metrics == ()
    assert client_metrics_names([STATIC], {"zeta": {"metrics": "*"}, "gone": {}}) == (
        "producers",
        "zeta",
    )


def test_describe_shows_the_source_of_every_key() -> None:
    result = describe_client_metrics(
        "producers", STATIC, {"interval.ms": "1000"}, include_synonyms=True
    )
    assert result.error_code == 0
    by_name = {entry.name: entry for entry in result.configs}
    assert [entry.name for entry in result.configs] == ["metrics", "interval.ms", "match"]
    interval = by_name["interval.ms"]
    assert (interval.value, interval.config_source, interval.config_type) == ("1000", 7, 3)
    assert interval.synonyms == (
        DescribeConfigsSynonym(name="interval.ms", value="1000", source=7),
        DescribeConfigsSynonym(name="interval.ms", value="60000", source=4),
    )
    metrics = by_name["metrics"]
    assert (metrics.value, metrics.config_source, metrics.config_type) == (
        "org.apache.kafka.producer.",
        ConfigSource.STATIC_BROKER_CONFIG,
        7,
    )


def test_describe_of_a_dynamic_only_or_unknown_name_shows_defaults() -> None:
    dynamic = describe_client_metrics("d", None, {"metrics": "*"})
    assert [(e.name, e.value, e.config_source, e.synonyms) for e in dynamic.configs] == [
        ("metrics", "*", 7, ()),
        ("interval.ms", "300000", 5, ()),
        ("match", "", 5, ()),
    ]
    unknown = describe_client_metrics("nope", None, None, include_synonyms=True)
    assert unknown.error_code == 0
    assert [(e.value, e.config_source, e.synonyms) for e in unknown.configs] == [
        ("", 5, ()),
        ("300000", 5, ()),
        ("", 5, ()),
    ]


def test_describe_honours_configuration_keys_and_refuses_an_empty_name() -> None:
    result = describe_client_metrics("d", None, None, configuration_keys=["match", "bogus"])
    assert [e.name for e in result.configs] == ["match"]
    empty = describe_client_metrics("", None, None)
    assert (empty.error_code, empty.error_message, empty.configs) == (
        42,
        "Client metrics subscription name must not be empty",
        (),
    )
