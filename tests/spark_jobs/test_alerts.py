"""client_alerts_1h: the health rules over landing rows, firing where the data breaks them only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from health_rules import load_rules, parse_rules
from spark_jobs.rollups import alert_points, client_alerts, push_times
from tests.spark_jobs.support import assert_rows, at, frame, point

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

THROTTLE = "org.apache.kafka.producer.produce.throttle.time.avg"
LATENCY = "org.apache.kafka.consumer.node.request.latency.max"
RULES = parse_rules(
    """
[[rule]]
name = "throttled"
metric = "org.apache.kafka.producer.produce.throttle.time.avg"
aggregation = "min"
op = ">"
threshold = 0
for_s = 300
severity = "warning"
meaning = "throttled for 5 minutes"

[[rule]]
name = "slow"
metric = "org.apache.kafka.*.node.request.latency.max"
aggregation = "last"
op = ">="
threshold = 1000
for_s = 0
severity = "info"
meaning = "a slow request"

[[rule]]
name = "bad_software"
metric = "kip714.client.software_known_bad"
aggregation = "last"
op = "=="
threshold = 1
for_s = 0
severity = "critical"
meaning = "known-bad librdkafka"

[[known_bad]]
library = "librdkafka"
first = "2.5.0"
last = "2.10.0"
reason = "null Metrics"
""",
    "test",
)
GOOD = {"client_software_name": "librdkafka", "client_software_version": "2.16.0"}


def test_rules_fire_per_client_and_hour_on_the_windows_that_break_them(spark: SparkSession) -> None:
    throttled = {"client_id": "p1", "client_instance_id": "i1", **GOOD}
    blinked = {"client_id": "p2", "client_instance_id": "i2", **GOOD}
    wrapped_bad = {
        "client_id": "c3",
        "client_instance_id": "i3",
        "client_software_name": "confluent-kafka-python",
        "client_software_version": "2.6.0-rdkafka-2.6.1",
    }
    node1 = {"attributes": {"node.id": "1"}}
    rows = [
        # p1: throttled all through 04:00-04:05 (fires), and 04:05-04:10 but for one point (not).
        *(point(time=at(m), metric_name=THROTTLE, value=5.0 + m, **throttled) for m in range(5)),
        *(point(time=at(m), metric_name=THROTTLE, value=0.0 if m == 7 else 3.0, **throttled)
          for m in range(5, 10)),
        # p2: never throttled for a whole window.
        *(point(time=at(m), metric_name=THROTTLE, value=0.0 if m % 2 else 9.0, **blinked)
          for m in range(10)),
        # c3: one slow request at 04:20 and one at 05:02 (two hours); known-bad software.
        point(time=at(20), metric_name=LATENCY, value=1500.0, **node1, **wrapped_bad),
        point(time=at(21), metric_name=LATENCY, value=999.0, **node1, **wrapped_bad),
        point(time=at(2, hour=5), metric_name=LATENCY, value=1000.0, **wrapped_bad),
        # A metric no rule reads.
        point(time=at(1), metric_name="org.apache.kafka.producer.other", value=1e9, **throttled),
    ]  # fmt: skip
    points = frame(spark, rows)
    alerts = client_alerts(alert_points(points, RULES), RULES).orderBy(
        "rule", "client_id", "window_start"
    )
    p1 = ("p1", "i1", "librdkafka", "2.16.0")
    c3 = ("c3", "i3", "confluent-kafka-python", "2.6.0-rdkafka-2.6.1")
    hour4, hour5, hour6 = at(0), at(0, hour=5), at(0, hour=6)
    assert_rows(
        spark,
        alerts,
        [
            (hour4, hour5, *c3, "bad_software", "critical", at(20), at(21), 1.0, 1.0),
            (hour5, hour6, *c3, "bad_software", "critical", at(2, hour=5), at(2, hour=5), 1.0, 1.0),
            (hour4, hour5, *c3, "slow", "info", at(20), at(20), 1500.0, 1000.0),
            (hour5, hour6, *c3, "slow", "info", at(2, hour=5), at(2, hour=5), 1000.0, 1000.0),
            (hour4, hour5, *p1, "throttled", "warning", at(0), at(5), 5.0, 0.0),
        ],
    )


def test_the_shipped_rules_evaluate_and_stay_silent_on_healthy_clients(spark: SparkSession) -> None:
    rules = load_rules()
    healthy = [
        point(time=at(m), metric_name=THROTTLE, value=0.0, client_id="ok", **GOOD)
        for m in range(10)
    ]
    alerts = client_alerts(alert_points(frame(spark, healthy), rules), rules)
    assert alerts.count() == 0
    assert [field.name for field in alerts.schema.fields][-4:] == [
        "first_fired", "last_fired", "value", "threshold"
    ]  # fmt: skip


STOPPED = parse_rules(
    """
[[rule]]
name = "stopped"
metric = "kip714.client.push_age_intervals"
aggregation = "last"
op = ">"
threshold = 3
for_s = 0
severity = "warning"
meaning = "no push for over 3 intervals"
""",
    "test",
)


def test_a_silence_over_three_push_intervals_fires_until_the_next_push_or_the_lake_s_end(
    spark: SparkSession,
) -> None:
    """Push intervals are measured per client: the median gap between its pushes."""
    gap = {"client_id": "gap", "client_instance_id": "ig", **GOOD}
    quit_ = {"client_id": "quit", "client_instance_id": "iq", **GOOD}
    hung = {"client_id": "hung", "client_instance_id": "ih", **GOOD}
    steady = {"client_id": "steady", "client_instance_id": "is", **GOOD}

    def sec(s: int) -> datetime:
        return at(s // 60, s % 60)

    rows = [
        # gap: every 10 s, but silent from 00:30 to 01:40 (7 intervals), then on to 03:00.
        *(point(time=sec(s), metric_name=THROTTLE, value=0.0, **gap)
          for s in (0, 10, 20, 30, *range(100, 181, 10))),
        # quit: every 10 s up to 00:50, its last push terminating: never fires.
        *(point(time=sec(s), metric_name=THROTTLE, value=0.0, terminating=s == 50, **quit_)
          for s in range(0, 51, 10)),
        # hung: every 20 s up to 00:40, then nothing while others push on (to 03:00).
        *(point(time=sec(s), metric_name=THROTTLE, value=0.0, **hung) for s in (0, 20, 40)),
        # steady: every 10 s to 03:00 (the lake's end), two points per push.
        *(point(time=sec(s), metric_name=name, value=0.0, **steady)
          for s in range(0, 181, 10) for name in (THROTTLE, LATENCY)),
    ]  # fmt: skip
    points = frame(spark, rows)
    alerts = client_alerts(alert_points(points, STOPPED), STOPPED, push_times(points))
    fired = {
        row["client_id"]: (row["first_fired"], row["last_fired"], round(row["value"], 6))
        for row in alerts.collect()
    }
    utc = {k: (a.replace(tzinfo=UTC), b.replace(tzinfo=UTC), v) for k, (a, b, v) in fired.items()}
    assert utc == {
        "gap": (at(1), at(1, 40), 7.0),  # 00:30 + 3 x 10 s, until the next push
        "hung": (at(1, 40), at(3), 7.0),  # 00:40 + 3 x 20 s, until the lake's last point
    }


def test_each_shipped_rule_fires_on_data_that_breaks_it_and_on_nothing_else(
    spark: SparkSession,
) -> None:
    """One breaking client and one healthy client per shipped rule, all pushing every 30 s."""
    rules = load_rules()
    bad = {"client_software_name": "librdkafka", "client_software_version": "2.6.0"}
    span = range(0, 2 * 1800 + 1, 30)  # two of the longest rule window (900 s), and more
    rows = []
    for rule in rules.rules:
        metric, worse, fine = rule.metric.replace("*", "producer"), 0.0, 0.0
        software, pushed = GOOD, list(span)
        if rule.name == "software_known_bad":
            metric, software = THROTTLE, bad
        elif rule.name == "client_stopped_pushing":
            metric, pushed = THROTTLE, [s for s in span if s < 600]  # then silent
        else:
            worse = rule.threshold / 2 if rule.op == "<" else rule.threshold * 2 + 1
            fine = (rule.threshold + 1) / 2 if rule.op == "<" else 0.0
        breaking = {"client_id": f"{rule.name}-bad", "client_instance_id": f"{rule.name}-b"}
        healthy = {"client_id": f"{rule.name}-ok", "client_instance_id": f"{rule.name}-h"}
        rows += [_at_second(s, metric_name=metric, value=worse, **breaking, **software)
                 for s in pushed]  # fmt: skip
        rows += [_at_second(s, metric_name=metric, value=fine, **healthy, **GOOD) for s in span]
    points = frame(spark, rows)
    alerts = client_alerts(alert_points(points, rules), rules, push_times(points))
    fired = {(row["client_id"], row["rule"]) for row in alerts.collect()}
    assert fired == {(f"{rule.name}-bad", rule.name) for rule in rules.rules}


def _at_second(second: int, **fields: Any) -> dict[str, Any]:
    return point(time=at(0) + timedelta(seconds=second), **fields)
