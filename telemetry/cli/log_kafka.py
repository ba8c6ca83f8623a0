"""``kip714 log status|skip`` when the log is the pushes topic (``[log] store = "kafka"``).

``status`` asks the cluster for each partition's start and end and for each
configured exporter's group offsets (committed, read without joining the
group), and reports the lag per partition. ``skip`` is refused: the
positions are the groups' offsets, which Kafka's own tool moves.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from telemetry.server.kafka_exporter_host import group_id

if TYPE_CHECKING:
    from telemetry.server.config import Settings

__all__ = ["SKIP_REFUSAL", "status"]

SKIP_REFUSAL = (
    "[log] store = \"kafka\": the exporters' positions are their consumer groups' offsets; "
    "use kafka-consumer-groups.sh --reset-offsets --group kip714-<exporter>-<namespace> "
    "--topic <[log] topic>"
)


class KafkaStatusError(Exception):
    """The cluster did not answer, or the topic is missing."""


def status(settings: Settings, *, as_json: bool) -> int:
    document = _document(settings)
    if as_json:
        print(json.dumps(document, indent=1))
    else:
        print("\n".join(_as_text(document)))
    return 0


def _document(settings: Settings) -> dict[str, Any]:
    log = settings.log
    assert log.cluster is not None  # parse_log sets it for store = "kafka"
    timeout = log.cluster.startup_timeout_s
    where = f"topic {log.topic} at {log.cluster.bootstrap_servers}"
    admin = AdminClient({**log.cluster.client_config()})
    try:
        metadata = admin.list_topics(timeout=timeout)  # all topics: never auto-creates
    except KafkaException as error:
        raise KafkaStatusError(f"{where}: the cluster did not answer: {error}") from None
    topic = metadata.topics.get(log.topic)
    if topic is None or topic.error is not None:
        raise KafkaStatusError(f"{where}: the pushes topic is missing")
    partitions = sorted(topic.partitions)
    document: dict[str, Any] = {
        "store": "kafka",
        "topic": log.topic,
        "bootstrap_servers": log.cluster.bootstrap_servers,
        "partitions": {},
        "exporters": {},
    }
    for exporter in settings.exporters:
        group = group_id(exporter)
        consumer = Consumer({**log.cluster.client_config(), "group.id": group})
        try:
            if not document["partitions"]:
                for p in partitions:
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(log.topic, p), timeout=timeout
                    )
                    document["partitions"][str(p)] = {"start": low, "end": high}
            committed = consumer.committed(
                [TopicPartition(log.topic, p) for p in partitions], timeout=timeout
            )
        except KafkaException as error:
            raise KafkaStatusError(f"{where}: group {group}: {error}") from None
        finally:
            consumer.close()
        per_partition: dict[str, Any] = {}
        for tp in committed:
            bounds = document["partitions"][str(tp.partition)]
            at = tp.offset if tp.offset >= 0 else bounds["start"]  # nothing committed yet
            per_partition[str(tp.partition)] = {
                "committed": tp.offset if tp.offset >= 0 else None,
                "lag": max(0, bounds["end"] - at),
            }
        document["exporters"][exporter.name] = {
            "group": group,
            "lag": sum(entry["lag"] for entry in per_partition.values()),
            "partitions": per_partition,
        }
    return document


def _as_text(document: dict[str, Any]) -> list[str]:
    ends = sum(bounds["end"] for bounds in document["partitions"].values())
    lines = [
        f"ingest log: topic {document['topic']} at {document['bootstrap_servers']}, "
        f"{len(document['partitions'])} partitions, {ends} records produced in all",
    ]
    if not document["exporters"]:
        lines.append("exporters: none configured")
    for name, exporter in document["exporters"].items():
        lines.append(f"exporter {name} (group {exporter['group']}): lag {exporter['lag']}")
        for partition, entry in exporter["partitions"].items():
            committed = "nothing" if entry["committed"] is None else entry["committed"]
            bounds = document["partitions"][partition]
            lines.append(
                f"  partition {partition}: committed {committed}, end {bounds['end']}, "
                f"lag {entry['lag']}"
            )
    return lines
