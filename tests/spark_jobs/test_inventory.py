"""client_inventory_1h: who pushed in each hour, from which principal and ingest node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.rollups import INVENTORY_COLUMNS, client_inventory
from tests.spark_jobs.support import assert_rows, at, frame, point

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LATENCY = "org.apache.kafka.producer.node.request.latency.avg"
POLL = "org.apache.kafka.consumer.poll.idle.ratio.avg"


def test_one_row_per_client_and_hour_counts_pushes_per_node_and_names_the_kind(
    spark: SparkSession,
) -> None:
    producer = {"client_id": "p", "client_instance_id": "ip", "principal": "User:alice"}
    consumer = {"client_id": "c", "client_instance_id": "ic", "principal": "User:bob"}
    rows = [
        # p: two pushes of two points on node a, one push on node b with the same offset 1.
        point(time=at(1), metric_name=LATENCY, push_offset=1, ingest_node="a", **producer),
        point(time=at(1), metric_name="other", push_offset=1, ingest_node="a", **producer),
        point(time=at(2), metric_name=LATENCY, push_offset=2, ingest_node="a", **producer),
        point(time=at(3), metric_name=LATENCY, push_offset=1, ingest_node="b", **producer),
        # c: one push in hour 4 and one in hour 5.
        point(time=at(59), metric_name=POLL, push_offset=7, ingest_node="a", **consumer),
        point(time=at(0, hour=5), metric_name=POLL, push_offset=8, ingest_node="a", **consumer),
        # A client that pushed no KIP-714 standard metric: no type.
        point(time=at(5), client_id="x", client_instance_id="ix", push_offset=9),
    ]
    inventory = client_inventory(frame(spark, rows)).orderBy("client_id", "window_start")
    assert tuple(inventory.columns) == INVENTORY_COLUMNS
    software = ("librdkafka", "2.16.0")
    hour4, hour5, hour6 = at(0), at(0, hour=5), at(0, hour=6)
    assert_rows(
        spark,
        inventory,
        [
            (hour4, hour5, "c", "ic", *software, "consumer", "User:bob", "a", 1, 1, at(59), at(59)),
            (hour5, hour6, "c", "ic", *software, "consumer", "User:bob", "a", 1, 1, hour5, hour5),
            (hour4, hour5, "p", "ip", *software, "producer", "User:alice", "b", 3, 4, at(1), at(3)),
            (hour4, hour5, "x", "ix", *software, None, None, None, 1, 1, at(5), at(5)),
        ],
    )
