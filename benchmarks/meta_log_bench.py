"""How fast a change made through one node is in force on another, with the shared metadata store.

Starts a real Kafka broker (``tests/kafka/kafka_dist.py``, cached jars), opens
two :class:`KafkaMetadataLog` s on one topic as two nodes would, and:

1. appends ``--changes`` quota changes, one at a time, through the first and
   measures the acknowledgement (``acks=all`` and applied on the first) and
   the time until the second has it in its image, both from the request;
2. writes ``--entities`` entities in one append and measures a third log's
   start: reading the topic to its end.

    python3 benchmarks/meta_log_bench.py
    python3 benchmarks/meta_log_bench.py --changes 500 --entities 10000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from telemetry.metastore import ClientQuotaRecord, MetadataRecord
from telemetry.metastore.kafka_log import KafkaMetadataLog
from telemetry.metastore.settings import parse_meta
from tests.kafka.kafka_dist import KafkaBroker, kafka_jars, plugin_jar

_WAIT_S = 10.0


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * fraction) - 1)]


def _ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--entities", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        broker = KafkaBroker(Path(workdir) / "broker", kafka_jars(), plugin_jar(), {}).start()
        try:
            settings = parse_meta({"store": "kafka", "bootstrap_servers": broker.bootstrap})
            writer, reader = KafkaMetadataLog.open(settings), KafkaMetadataLog.open(settings)
            acknowledged, applied = [], []
            for index in range(args.changes):
                entity = (("client-id", f"bench-{index % 7}"),)
                value = float(index + 1)
                change = ClientQuotaRecord(entity=entity, key="push_byte_rate", value=value)
                started = time.monotonic()
                writer.append([change])
                acknowledged.append(time.monotonic() - started)
                while reader.image.client_quotas.get(entity, {}).get("push_byte_rate") != value:
                    if time.monotonic() - started > _WAIT_S:
                        raise SystemExit(f"change {index} not applied within {_WAIT_S} s")
                    time.sleep(0.0005)
                applied.append(time.monotonic() - started)
            median = statistics.median(acknowledged)
            print(
                f"{args.changes} changes: acknowledged median {_ms(median)}"
                f" p99 {_ms(_percentile(acknowledged, 0.99))}; applied on the other node median "
                f"{_ms(statistics.median(applied))} p99 {_ms(_percentile(applied, 0.99))} "
                f"max {_ms(max(applied))}"
            )
            many: list[MetadataRecord] = [
                ClientQuotaRecord(entity=(("client-id", f"e{i}"),), key="push_byte_rate", value=1)
                for i in range(args.entities)
            ]
            writer.append(many)
            started = time.monotonic()
            starting = KafkaMetadataLog.open(settings)
            took = time.monotonic() - started
            print(f"a node starting reads {starting.next_offset} offsets in {took:.2f} s")
            for log in (starting, writer, reader):
                log.close()
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
