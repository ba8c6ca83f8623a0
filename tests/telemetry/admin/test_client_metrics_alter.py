"""IncrementalAlterConfigs on client-metrics resources: Kafka's preprocessing, operations,
validation of the merged result, and the records a change produces."""

from __future__ import annotations

import pytest

from telemetry.admin.client_metrics_alter import alter_client_metrics, duplicate_resources
from telemetry.errors import InvalidConfigError, InvalidRequestError, TelemetryError
from telemetry.metastore import ConfigRecord
from telemetry.wire.config_messages import AlterableConfig, AlterConfigOp, AlterConfigsResource

SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOp.SET,
    AlterConfigOp.DELETE,
    AlterConfigOp.APPEND,
    AlterConfigOp.SUBTRACT,
)


def _op(name: str, operation: int, value: str | None) -> AlterableConfig:
    return AlterableConfig(name=name, config_operation=operation, value=value)


def test_create_with_set_records_each_key() -> None:
    alteration = alter_client_metrics(
        "sub1", {}, [_op("interval.ms", SET, "1000"), _op("metrics", SET, "*")]
    )
    assert alteration.config == {"interval.ms": "1000", "metrics": "*"}
    assert alteration.records == (
        ConfigRecord(resource_type=16, resource_name="sub1", name="interval.ms", value="1000"),
        ConfigRecord(resource_type=16, resource_name="sub1", name="metrics", value="*"),
    )
    assert alteration.subscription is not None
    assert alteration.subscription.interval_ms == 1000
    assert alteration.subscription.all_metrics


def test_an_unchanged_value_writes_no_record() -> None:
    alteration = alter_client_metrics("s", {"metrics": "*"}, [_op("metrics", SET, "*")])
    assert alteration.records == ()


def test_delete_of_every_key_removes_the_subscription() -> None:
    alteration = alter_client_metrics(
        "s", {"metrics": "a", "interval.ms": "500"}, [_op("metrics", DELETE, None),
        _op("interval.ms", DELETE, "")]
    )  # fmt: skip
    assert alteration.subscription is None
    assert alteration.config == {}
    assert [r.value for r in alteration.records] == [None, None]


def test_append_and_subtract_work_on_list_keys() -> None:
    current = {"metrics": "a.,b."}
    appended = alter_client_metrics("s", current, [_op("metrics", APPEND, "b.,c.")])
    assert appended.config == {"metrics": "a.,b.,c."}
    subtracted = alter_client_metrics("s", current, [_op("metrics", SUBTRACT, "a.,z.")])
    assert subtracted.config == {"metrics": "b."}
    created = alter_client_metrics("s", {}, [_op("match", APPEND, "client_id=x.*")])
    assert created.config == {"match": "client_id=x.*"}


@pytest.mark.parametrize(
    ("ops", "error", "message"),
    [
        (
            [_op("metrics", SET, "a"), _op("metrics", DELETE, None)],
            InvalidRequestError,
            "Error due to duplicate config keys",
        ),
        (
            [_op("metrics", SET, None)],
            InvalidRequestError,
            "Null value not supported for : metrics",
        ),
        (
            [_op("interval.ms", APPEND, "5")],
            InvalidConfigError,
            "Can't APPEND to key interval.ms because its type is not LIST.",
        ),
        (
            [_op("interval.ms", SUBTRACT, "5")],
            InvalidConfigError,
            "Can't SUBTRACT to key interval.ms because its type is not LIST.",
        ),
        ([_op("metrics", 9, "a")], InvalidRequestError, "Unknown alter config operation type 9"),
        (
            [_op("color", SET, "red")],
            InvalidRequestError,
            "Unknown client metrics configuration: color",
        ),
        (
            [_op("interval.ms", SET, "99")],
            InvalidRequestError,
            "Invalid value 99 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
        ),
        (
            [_op("interval.ms", SET, "3600001")],
            InvalidRequestError,
            "Invalid value 3600001 for interval.ms, interval must be between 100 and 3600000",
        ),
        (
            [_op("interval.ms", SET, "soon")],
            InvalidConfigError,
            "Invalid value soon for configuration interval.ms: Not a number of type INT",
        ),
        (
            [_op("match", SET, "client_colour=red")],
            InvalidConfigError,
            "Illegal client matching pattern: client_colour=red",
        ),
        ([_op("match", SET, "client_id=(")], InvalidConfigError, "Illegal client matching pattern"),
        ([_op("match", SET, "client_id")], InvalidConfigError, "Illegal client matching pattern"),
    ],
)
def test_refusals_carry_kafkas_code_and_message(
    ops: list[AlterableConfig], error: type[TelemetryError], message: str
) -> None:
    with pytest.raises(error) as caught:
        alter_client_metrics("s", {}, ops)
    assert str(caught.value).startswith(message)
    assert caught.value.error_code == (42 if error is InvalidRequestError else 40)


def test_interval_bounds_are_inclusive() -> None:
    for interval in ("100", "3600000"):
        alteration = alter_client_metrics("s", {}, [_op("interval.ms", SET, interval)])
        assert alteration.subscription is not None
        assert alteration.subscription.interval_ms == int(interval)


def test_empty_name_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="Subscription name can't be empty"):
        alter_client_metrics("", {}, [_op("metrics", SET, "*")])


def test_validation_judges_the_merged_config() -> None:
    # The stored interval is fine alone; the request's match is judged with it.
    with pytest.raises(InvalidConfigError):
        alter_client_metrics("s", {"interval.ms": "500"}, [_op("match", SET, "nope")])


def test_empty_match_is_match_all_as_in_kafka_4() -> None:
    alteration = alter_client_metrics("s", {}, [_op("match", SET, ""), _op("metrics", SET, "*")])
    assert alteration.subscription is not None
    assert dict(alteration.subscription.match) == {}


def test_duplicate_resources() -> None:
    def resource(name: str, kind: int = 16) -> AlterConfigsResource:
        return AlterConfigsResource(resource_type=kind, resource_name=name, configs=())

    resources = [resource("a"), resource("b"), resource("a"), resource("a", 2)]
    assert duplicate_resources(resources) == {(16, "a")}
