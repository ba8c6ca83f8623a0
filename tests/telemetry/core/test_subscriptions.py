"""Subscription validation, registry versioning and evaluation.

Ports ``ClientMetricsConfigsTest`` and the subscription cases of
``ClientMetricsManagerTest`` (Kafka's ``ClientMetricsTestUtils`` defaults).
"""

from __future__ import annotations

import re

import pytest

from telemetry.core.client_instance import ClientInstanceMetadata
from telemetry.core.client_uuid import Uuid
from telemetry.core.subscriptions import (
    ALLOWED_MATCH_KEYS,
    Subscription,
    SubscriptionRegistry,
    parse_list,
    parse_match_patterns,
    validate_subscription,
)
from telemetry.errors import ErrorCode, InvalidConfigError, InvalidRequestError, TelemetryError

DEFAULT_METRICS = (
    "org.apache.kafka.client.producer.partition.queue.,"
    "org.apache.kafka.client.producer.partition.latency"
)
UUID_1_2 = Uuid(1, 2)
DEFAULT_MATCH = "client_software_name=apache-kafka-java,client_software_version=3.5.*"


def default_properties() -> dict[str, object]:
    return {"metrics": DEFAULT_METRICS, "interval.ms": "30000", "match": DEFAULT_MATCH}


def metadata(
    *,
    client_id: str = "producer-1",
    software_name: str | None = "apache-kafka-java",
    software_version: str | None = "3.5.2",
    address: str = "127.0.0.1",
    port: int = 56078,
    uuid: Uuid = UUID_1_2,
) -> ClientInstanceMetadata:
    return ClientInstanceMetadata(
        client_instance_id=uuid,
        client_id=client_id,
        client_software_name=software_name,
        client_software_version=software_version,
        client_source_address=address,
        client_source_port=port,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a, b", ["a", "b"]),
        ("a ,b", ["a", "b"]),
        ("  a,b  ", ["a", "b"]),
        ("", []),
        ("   ", []),
        ("a,,b", ["a", "", "b"]),
        ("a,", ["a", ""]),
        ("*", ["*"]),
        (["x", "y"], ["x", "y"]),
        ([], []),
    ],
)
def test_parse_list_like_configdef(value: object, expected: list[str]) -> None:
    assert parse_list("metrics", value) == expected


def test_parse_list_splits_only_on_java_whitespace() -> None:
    # Java's \s is ASCII; a non-breaking space stays part of the item.
    assert parse_list("metrics", "a\u00a0, b") == ["a\u00a0", "b"]


def test_parse_list_rejects_non_strings() -> None:
    with pytest.raises(InvalidConfigError):
        parse_list("metrics", 5)
    with pytest.raises(InvalidConfigError):
        parse_list("metrics", ["a", 1])


def test_parse_matching_patterns() -> None:
    patterns = parse_match_patterns(["client_id=consumer-.*", "client_software_name=kafka"])
    assert {key: p.pattern for key, p in patterns.items()} == {
        "client_id": "consumer-.*",
        "client_software_name": "kafka",
    }
    assert parse_match_patterns([]) == {}


def test_parse_matching_patterns_trims_key_and_value() -> None:
    patterns = parse_match_patterns([" client_id = consumer-.* "])
    assert patterns["client_id"].pattern == "consumer-.*"


def test_regex_containing_equals_kafka_21041() -> None:
    patterns = parse_match_patterns(["client_id=foo=bar"])
    assert patterns["client_id"].pattern == "foo=bar"
    assert parse_match_patterns(["client_id="])["client_id"].pattern == ""


@pytest.mark.parametrize(
    "entry", ["client_id", "unknown_param=foo", "client_id=[unclosed", "=x", "*=x", ""]
)
def test_parse_matching_patterns_invalid(entry: str) -> None:
    with pytest.raises(InvalidConfigError, match="Illegal client matching pattern") as info:
        parse_match_patterns([entry])
    assert info.value.error_code == ErrorCode.INVALID_CONFIG


def test_repeated_match_key_keeps_the_last_regex() -> None:
    assert parse_match_patterns(["client_id=a", "client_id=b"])["client_id"].pattern == "b"


def test_allowed_match_keys_are_exactly_kafkas() -> None:
    assert (
        frozenset(
            {
                "client_instance_id",
                "client_id",
                "client_software_name",
                "client_software_version",
                "client_source_address",
                "client_source_port",
            }
        )
        == ALLOWED_MATCH_KEYS
    )


def test_validate_builds_the_subscription() -> None:
    subscription = validate_subscription("sub-1", default_properties())
    assert subscription is not None
    assert subscription.metrics == (
        "org.apache.kafka.client.producer.partition.queue.",
        "org.apache.kafka.client.producer.partition.latency",
    )
    assert subscription.interval_ms == 30000
    assert {k: p.pattern for k, p in subscription.match.items()} == {
        "client_software_name": "apache-kafka-java",
        "client_software_version": "3.5.*",
    }


def test_validate_defaults() -> None:
    subscription = validate_subscription("s", {"metrics": "*"})
    assert subscription is not None
    assert subscription.interval_ms == 300000
    assert subscription.match == {}
    assert subscription.all_metrics


def test_empty_properties_mean_delete() -> None:
    assert validate_subscription("s", {}) is None


@pytest.mark.parametrize(
    ("name", "properties", "error", "code", "message"),
    [
        ("", {"metrics": "*"}, InvalidRequestError, 42, "Subscription name can't be empty"),
        (
            "s",
            {"random": "random"},
            InvalidRequestError,
            42,
            "Unknown client metrics configuration: random",
        ),
        (
            "s",
            {"interval.ms": "bbb"},
            InvalidConfigError,
            40,
            "Invalid value bbb for configuration interval.ms: Not a number of type INT",
        ),
        ("s", {"interval.ms": "1.5"}, InvalidConfigError, 40, "Not a number of type INT"),
        ("s", {"interval.ms": "99999999999"}, InvalidConfigError, 40, "Not a number of type INT"),
        ("s", {"interval.ms": True}, InvalidConfigError, 40, "Not a number of type INT"),
        (
            "s",
            {"interval.ms": "99"},
            InvalidRequestError,
            42,
            "Invalid value 99 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
        ),
        (
            "s",
            {"interval.ms": 3600001},
            InvalidRequestError,
            42,
            "Invalid value 3600001 for interval.ms",
        ),
        (
            "s",
            {"interval.ms": "-100"},
            InvalidRequestError,
            42,
            "Invalid value -100 for interval.ms",
        ),
        ("s", {"interval.ms": "0"}, InvalidRequestError, 42, "Invalid value 0 for interval.ms"),
        (
            "s",
            {"match": "client_id"},
            InvalidConfigError,
            40,
            "Illegal client matching pattern: client_id",
        ),
        ("s", {"metrics": "a,a"}, InvalidConfigError, 40, "must not be duplicated"),
        (
            "s",
            {"match": "client_id=a, client_id=a"},
            InvalidConfigError,
            40,
            "must not be duplicated",
        ),
    ],
)
def test_validation_errors_in_kafkas_order(
    name: str,
    properties: dict[str, object],
    error: type[TelemetryError],
    code: int,
    message: str,
) -> None:
    with pytest.raises(error, match=re.escape(message)) as info:
        validate_subscription(name, properties)
    assert info.value.error_code == code


def test_unknown_key_wins_over_bad_value() -> None:
    with pytest.raises(InvalidRequestError):
        validate_subscription("s", {"interval.ms": "bbb", "bogus": "1"})


def test_range_check_comes_before_match_patterns() -> None:
    # Kafka: ConfigDef.parse (types only), then the interval range, then the patterns.
    with pytest.raises(InvalidRequestError):
        validate_subscription("s", {"interval.ms": "50", "match": "nope=1"})
    with pytest.raises(InvalidConfigError, match="INT"):
        validate_subscription("s", {"interval.ms": "x", "match": "nope=1"})


@pytest.mark.parametrize("interval", ["100", "3600000", " 200 ", "+300"])
def test_interval_bounds_are_inclusive(interval: str) -> None:
    subscription = validate_subscription("s", {"interval.ms": interval})
    assert subscription is not None
    assert subscription.interval_ms == int(interval.strip())


def test_subscription_value_validates_itself() -> None:
    with pytest.raises(InvalidRequestError):
        Subscription(name="s", interval_ms=0)
    with pytest.raises(InvalidRequestError):
        Subscription(name="")
    with pytest.raises(InvalidConfigError):
        Subscription(name="s", match={"nope": re.compile("x")})


def test_registry_versions_like_kafka() -> None:
    registry = SubscriptionRegistry()
    assert registry.version == 0
    registry.update("sub-1", {})  # removing a missing subscription changes nothing
    assert (registry.version, len(registry)) == (0, 0)
    registry.update("sub-1", {"interval.ms": "100"})
    assert (registry.version, len(registry)) == (1, 1)
    registry.update("sub-1", {"interval.ms": "100"})  # identical update still counts
    assert registry.version == 2
    registry.update("sub-1", {})
    assert (registry.version, len(registry)) == (3, 0)
    assert registry.get("sub-1") is None


def test_registry_failed_update_changes_nothing() -> None:
    registry = SubscriptionRegistry()
    registry.update("sub-1", default_properties())
    with pytest.raises(InvalidRequestError):
        registry.update("sub-1", {"random": "random"})
    assert registry.version == 1
    subscription = registry.get("sub-1")
    assert subscription is not None
    assert subscription.interval_ms == 30000


def test_matching_is_full_string_and_anded() -> None:
    java = metadata()
    assert java.is_match({})
    assert java.is_match(parse_match_patterns(["client_software_version=3.5.*"]))
    assert not java.is_match(parse_match_patterns(["client_software_version=3.5"]))
    assert not java.is_match(parse_match_patterns(["client_software_name=kafka"]))  # not find()
    assert java.is_match(parse_match_patterns(["client_id=producer-1", "client_source_port=56078"]))
    assert not java.is_match(parse_match_patterns(["client_id=producer-1", "client_source_port=1"]))
    assert java.is_match(parse_match_patterns(["client_source_address=127\\.0\\.0\\.1"]))
    assert java.is_match(parse_match_patterns(["client_instance_id=AAAAAAAAAAEAAAAAAAAAAg"]))
    assert not metadata(software_name=None).is_match(
        parse_match_patterns(["client_software_name=.*"])
    )
    assert not java.is_match({"unknown": re.compile(".*")})


def test_evaluate_union_min_interval_and_300000_quirk() -> None:
    registry = SubscriptionRegistry()
    assert registry.evaluate(metadata()).push_interval_ms == 300000
    assert registry.evaluate(metadata()).metrics == ()
    registry.update("slow", {"metrics": "a.", "interval.ms": "600000"})
    # Kafka starts the minimum at 300000, so asking for 10 minutes gives 5.
    assert registry.evaluate(metadata()).push_interval_ms == 300000
    registry.update("fast", {"metrics": "b., a.", "interval.ms": "1000"})
    registry.update("other", {"metrics": "c.", "interval.ms": "100", "match": "client_id=nobody"})
    evaluation = registry.evaluate(metadata())
    assert evaluation.push_interval_ms == 1000
    assert sorted(evaluation.metrics) == ["a.", "b."]


def test_evaluate_star_collapses_to_all() -> None:
    registry = SubscriptionRegistry()
    registry.update("sub-1", default_properties())
    registry.update("sub-2", {"metrics": "*"})
    evaluation = registry.evaluate(metadata())
    assert evaluation.metrics == ("*",)
    assert evaluation.push_interval_ms == 30000


def test_evaluate_default_match_skips_other_clients() -> None:
    registry = SubscriptionRegistry()
    registry.update("sub-1", default_properties())
    librdkafka = metadata(software_name="confluent-kafka-python", software_version="2.16.1")
    assert registry.evaluate(librdkafka).metrics == ()
    assert registry.evaluate(metadata()).metrics == (
        "org.apache.kafka.client.producer.partition.latency",
        "org.apache.kafka.client.producer.partition.queue.",
    )


def test_empty_metrics_value_means_no_metrics_not_all() -> None:
    # WarpStream documents "metrics=" as all metrics; in Kafka it is none.
    registry = SubscriptionRegistry()
    registry.update("s", {"metrics": "", "interval.ms": "1000"})
    evaluation = registry.evaluate(metadata())
    assert evaluation.metrics == ()
    assert evaluation.push_interval_ms == 1000
