"""A small realistic landing: two clients, two hours, gauges per broker, counters, a histogram."""

from __future__ import annotations

from typing import Any

from tests.spark_jobs.support import at, point

PRODUCER = "org.apache.kafka.producer."


def two_hours() -> list[dict[str, Any]]:
    rows = []
    offset = 0
    for hour in (4, 5):
        for minute in range(0, 60, 10):
            offset += 1
            for client, scale in (("p1", 1.0), ("p2", 3.0)):
                common = {
                    "client_id": client,
                    "client_instance_id": f"{client}-i",
                    "push_offset": offset,
                    "time": at(minute, 5, hour=hour),
                }
                for node in ("1", "2"):
                    rows.append(
                        point(
                            metric_name=PRODUCER + "node.request.latency.avg",
                            value=scale * (minute + int(node)),
                            attributes={"node.id": node},
                            **common,
                        )
                    )
                rows.append(
                    point(metric_name=PRODUCER + "record.queue.time.avg", value=scale, **common)
                )
                rows.append(
                    point(
                        metric_name=PRODUCER + "connection.creation.total",
                        metric_type="sum",
                        temporality="delta",
                        is_monotonic=True,
                        value=1.0,
                        **common,
                    )
                )
                rows.append(
                    point(
                        metric_name="h",
                        metric_type="histogram",
                        temporality="delta",
                        count=2,
                        sum=3.0,
                        bucket_counts=[1, 1],
                        explicit_bounds=[1.0],
                        **common,
                    )
                )
    return rows  # fmt: skip
