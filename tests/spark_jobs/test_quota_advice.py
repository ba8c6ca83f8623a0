"""quota_advice_1h: each quota entity's demand per hour and KIP-599's proposal from it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_jobs.rollups import QUOTA_ADVICE_COLUMNS, quota_advice
from spark_jobs.rollups.quota_advice import HEADROOM, PUSH_QUOTAS, RATE_QUOTAS
from spark_jobs.schema import LANDING_SCHEMA
from tests.spark_jobs.support import assert_rows, at, point

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OUT = "org.apache.kafka.producer.outgoing.byte.rate"
IN = "org.apache.kafka.consumer.incoming.byte.rate"


def test_the_rollup_reads_the_demand_as_the_cli_does() -> None:
    from telemetry.cli import quota_advice as cli  # noqa: PLC0415 - the CLI, not Spark's import

    assert RATE_QUOTAS == cli.RATE_METRICS
    assert PUSH_QUOTAS == cli.KIP714_QUOTAS
    assert cli.build_parser().get_default("headroom") == HEADROOM == 1.5
    # The users the rollup writes below, for the principals it reads there.
    assert (cli.user_of("User:alice"), cli.user_of(None)) == ("alice", "ANONYMOUS")


def test_peak_mean_and_proposal_per_hour_quota_and_entity(spark: SparkSession) -> None:
    def java(minute: int, second: int, metric: str, value: float, **who: Any) -> dict[str, Any]:
        return point(time=at(minute, second), metric_name=metric, value=value, **who)

    p1 = {"client_id": "p1", "client_instance_id": "a1", "principal": "User:alice"}
    p1_again = {**p1, "client_instance_id": "a2"}  # a second instance of the same entity
    c1 = {"client_id": "c1", "client_instance_id": "b1", "principal": None}
    rows = [
        # alice's p1: minute 0 pushes 100 and 300 (mean 200), minute 1 one 400; its second
        # instance adds 1,000 in minute 1: the minute's rate is 400 + 1,000.
        java(0, 10, OUT, 100.0, **p1),
        java(0, 40, OUT, 300.0, **p1),
        java(1, 10, OUT, 400.0, **p1),
        java(1, 20, OUT, 1000.0, **p1_again),
        # An anonymous consumer, in hour 5.
        java(0, 0, IN, 50.0, **c1) | {"time": at(0, hour=5)},
        # Not a demand metric: ignored.
        java(0, 5, "org.apache.kafka.producer.record.send.rate", 9.0, **p1),
    ]
    pushes = [
        # Two pushes of bob's p2, each two rows repeating the sizes: 6,000 and 12,000 bytes
        # (24,000 and 36,000 decoded) in minute 2.
        {**point(time=at(2, s), received_time=at(2, s), metric_name=m, client_id="p2",
                 client_instance_id="c9", principal="User:bob"),
         "push_bytes": sent, "push_decoded_bytes": decoded}
        for s, sent, decoded in ((0, 6000, 24000), (30, 12000, 36000))
        for m in ("m1", "m2")
    ]  # fmt: skip
    frame = spark.createDataFrame(
        [{**r, "push_bytes": None, "push_decoded_bytes": None} for r in rows] + pushes,
        LANDING_SCHEMA,  # with push_bytes and push_decoded_bytes
    )
    advice = quota_advice(frame).orderBy("window_start", "quota", "user")
    assert tuple(advice.columns) == QUOTA_ADVICE_COLUMNS
    hour4, hour5, hour6 = at(0), at(0, hour=5), at(0, hour=6)
    assert_rows(
        spark,
        advice,
        [
            (hour4, hour5, "producer_byte_rate", "alice", "p1", 2, 2, 1400.0, 800.0, 1.5, 2100.0),
            (hour4, hour5, "push_byte_rate", "bob", "p2", 1, 1, 300.0, 300.0, 1.5, 450.0),
            (
                hour4,
                hour5,
                "push_decoded_byte_rate",
                "bob",
                "p2",
                1,
                1,
                1000.0,
                1000.0,
                1.5,
                1500.0,
            ),
            (hour5, hour6, "consumer_byte_rate", "ANONYMOUS", "c1", 1, 1, 50.0, 50.0, 1.5, 75.0),
        ],
    )
    # A landing without the push-size columns: the Kafka quotas only.
    plain = quota_advice(spark.createDataFrame(rows, LANDING_SCHEMA))
    assert sorted(r["quota"] for r in plain.collect()) == [
        "consumer_byte_rate",
        "producer_byte_rate",
    ]
