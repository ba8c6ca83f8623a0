"""``kip714 quotas advise``: proposals from the rates clients pushed, replayed through Kafka's
quota algorithm (issue 42's first part: the Kafka quotas; kip714's own push quotas need the
push sizes in the lake, which it does not hold yet)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from exporters.iceberg.lake import open_catalog, open_table
from exporters.iceberg.schema import METRICS_TABLE, lake_metrics_schema
from exporters.iceberg.settings import lake_location
from quotas import DEFAULT, DemandEvent, replay
from telemetry.cli.main import main
from telemetry.cli.quota_advice import advise, demand_of

if TYPE_CHECKING:
    from pathlib import Path

T0 = dt.datetime(2026, 11, 25, 10, 0, tzinfo=dt.UTC)
OUT = "org.apache.kafka.producer.outgoing.byte.rate"
IN = "org.apache.kafka.consumer.incoming.byte.rate"
CONNECTIONS = "org.apache.kafka.producer.connection.creation.rate"
JAVA = {"client_software_name": "apache-kafka-java", "client_software_version": "4.4.0"}
RDKAFKA = {"client_software_name": "librdkafka", "client_software_version": "2.16.0"}


def _row(
    second: int, metric: str, value: float, client: str, user: str, **more: Any
) -> dict[str, Any]:
    return {
        "time": T0 + dt.timedelta(seconds=second),
        "metric_name": metric,
        "metric_type": "gauge",
        "value": value,
        "client_id": client,
        "client_instance_id": f"{client}-instance",
        "principal": f"User:{user}",
        **more,
    }


def _rows() -> list[dict[str, Any]]:
    rows = []
    for second in range(0, 600, 10):  # ten minutes, a push every 10 s
        minute = second // 60
        # p1 (alice) sends 1,000 B/s, 4,000 B/s in minute 3; p2 (bob) 2,000 B/s, 500 in minute 3.
        rows.append(_row(second, OUT, 4000.0 if minute == 3 else 1000.0, "p1", "alice", **JAVA))
        rows.append(_row(second, OUT, 500.0 if minute == 3 else 2000.0, "p2", "bob", **JAVA))
        rows.append(_row(second, IN, 300.0, "c1", "alice", **JAVA))
        rows.append(_row(second, CONNECTIONS, 0.0, "rd", "carol", **RDKAFKA))
    return rows


def test_peaks_proposals_and_replay_per_user_and_client_id() -> None:
    rows = _rows()
    demand = demand_of(
        [r for r in rows if r["metric_name"] in (OUT, IN)],
        [r for r in rows if r["metric_name"] == CONNECTIONS],
        60_000,
    )
    assert demand.silent == {("carol", "rd"): "librdkafka 2.16.0"}
    advice, arithmetic = advise(demand, headroom=1.5)
    assert arithmetic == []
    by_entity = {a.entity: a for a in advice}
    p1 = by_entity[("producer_byte_rate", "alice", "p1")]
    assert (p1.peak, p1.proposal) == (4000.0, 6000.0)
    assert p1.replayed.throttled_events == 0  # 1.5 x the peak: never throttled
    assert by_entity[("consumer_byte_rate", "alice", "c1")].proposal == pytest.approx(450.0)
    # A budget of 3,000 B/s for produce: the concurrent peak is 3,000 (minutes other than 3)
    # or 4,500 (minute 3); the sum of peaks is 6,000, so each peak x 3,000 / 4,500.
    advice, arithmetic = advise(demand, headroom=1.5, budget=3000.0)
    by_entity = {a.entity: a for a in advice}
    assert by_entity[("producer_byte_rate", "alice", "p1")].proposal == pytest.approx(2666.6667)
    assert by_entity[("producer_byte_rate", "bob", "p2")].proposal == pytest.approx(1333.3333)
    assert any("P = 4,500 B/s" in line and "1.33 x B" in line for line in arithmetic)
    # Under its budget share p1's minute at 4,000 B/s is throttled, bob's steady 2,000 is too.
    assert by_entity[("producer_byte_rate", "alice", "p1")].replayed.throttled_events > 0
    assert by_entity[("producer_byte_rate", "bob", "p2")].replayed.max_throttle_ms > 0


def test_the_command_reads_the_lake_and_prints_a_line_per_entity_and_the_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    location = lake_location({}, data)
    table = open_table(open_catalog(location), location.namespace, METRICS_TABLE)
    schema = lake_metrics_schema()
    table.append(pa.Table.from_pylist(_rows(), schema=schema))

    assert main(["quotas", "advise", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "3 quota entities with an observed rate, 1 without" in out
    lines = out.splitlines()
    p1 = next(line for line in lines if line.startswith("producer_byte_rate") and " p1 " in line)
    assert p1.split()[3:5] == ["4,000", "6,000"]
    assert any("no observed rate" in line and "rd" in line for line in lines)
    assert (
        "--add-config producer_byte_rate=6000 --entity-type users --entity-name alice "
        "--entity-type clients --entity-name p1" in out
    )
    # A range without the peak minute.
    window = ["--from", "2026-11-25T10:05", "--to", "2026-11-25T10:10"]
    assert main(["quotas", "advise", "--data-dir", str(data), *window]) == 0
    p1 = next(
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("producer_byte_rate") and " p1 " in line
    )
    assert p1.split()[3] == "1,000"


def test_bad_arguments_and_a_missing_lake_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quotas", "advise", "--data-dir", str(tmp_path), "--headroom", "0.5"]) == 2
    assert "--headroom must be at least 1" in capsys.readouterr().err
    assert main(["quotas", "advise", "--data-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no lake at" in err
    assert not (tmp_path / "none").exists()


def _several_clients() -> list[dict[str, Any]]:
    """alice's p1 (1,000 B/s, 4,000 in minute 3) and p3 (1,000), bob's p2 (2,000), carol's p1
    (3,000): alice has two client-ids, p1 two users."""
    rows = []
    for second in range(0, 600, 10):
        minute = second // 60
        rows.append(_row(second, OUT, 4000.0 if minute == 3 else 1000.0, "p1", "alice", **JAVA))
        rows.append(_row(second, OUT, 1000.0, "p3", "alice", **JAVA))
        rows.append(_row(second, OUT, 2000.0, "p2", "bob", **JAVA))
        rows.append(_row(second, OUT, 3000.0, "p1", "carol", **JAVA))
    return rows


def test_default_and_shared_entities_follow_kafkas_precedence() -> None:
    demand = demand_of(_several_clients(), [], 60_000)
    advice, _ = advise(demand, headroom=1.5)
    found = {a.entity: (a.precedence, a.sensors, a.peak, a.proposal) for a in advice}
    d = DEFAULT
    assert {e: v for e, v in found.items() if v[0] > 1} == {
        # 2: alice's clients, each its own sensor: the busiest is p1.
        ("producer_byte_rate", "alice", d): (2, 2, 4000.0, 6000.0),
        # 3: one sensor shared by alice's clients: 4,000 + 1,000 in minute 3.
        ("producer_byte_rate", "alice", None): (3, 1, 5000.0, 7500.0),
        # 4: client-id p1 of any user, one sensor per user.
        ("producer_byte_rate", d, "p1"): (4, 2, 4000.0, 6000.0),
        # 5: every (user, client-id) its own sensor.
        ("producer_byte_rate", d, d): (5, 4, 4000.0, 6000.0),
        # 6: one sensor per user: alice 5,000, bob 2,000, carol 3,000.
        ("producer_byte_rate", d, None): (6, 3, 5000.0, 7500.0),
        # 7 and 8: one sensor per client-id, shared by its users: p1 is 4,000 + 3,000.
        ("producer_byte_rate", None, "p1"): (7, 1, 7000.0, 10500.0),
        ("producer_byte_rate", None, d): (8, 3, 7000.0, 10500.0),
    }
    assert all(a.replayed.throttled_events == 0 for a in advice)  # 1.5 x every peak
    # With a budget, a default entity scales its busiest sensor's peak by the tenants' B/P:
    # P is the concurrent peak, 4,000 + 1,000 + 2,000 + 3,000 in minute 3.
    budgeted, arithmetic = advise(demand, headroom=1.5, budget=3500.0)
    every = next(a for a in budgeted if a.entity == ("producer_byte_rate", d, d))
    assert every.proposal == pytest.approx(4000.0 * 3500.0 / 10_000.0)
    assert "P = 10,000 B/s" in arithmetic[0]

    # A quota at the peak: /users/<default> replays alice's two clients as one sensor (the
    # sum), and the worst-throttled sensor is hers; bob's and carol's are never throttled.
    advice, _ = advise(demand, headroom=1.0)
    users = next(a for a in advice if a.entity == ("producer_byte_rate", d, None))
    start = min(min(windows) for windows in demand.by_entity.values())
    alice = [2000.0 + (3000.0 if minute == 3 else 0.0) for minute in range(10)]
    expected = replay(
        (
            DemandEvent(start + minute * 60_000 + second * 1000, rate)
            for minute, rate in enumerate(alice)
            for second in range(60)
        ),
        5000.0,
        start_ms=start,
        end_ms=start + 600_000,
    )
    assert expected.throttled_events > 0
    assert (users.replayed.throttled_ms, users.replayed.max_throttle_ms) == (
        expected.throttled_ms,
        expected.max_throttle_ms,
    )
    assert users.replayed.throttled_events == expected.throttled_events


def test_the_command_prints_the_default_entities_and_their_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    location = lake_location({}, data)
    table = open_table(open_catalog(location), location.namespace, METRICS_TABLE)
    table.append(pa.Table.from_pylist(_several_clients(), schema=lake_metrics_schema()))

    assert main(["quotas", "advise", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "4 quota entities with an observed rate, 0 without, 7 shared or default" in out
    cells = [line.split() for line in out.splitlines() if line.startswith("producer_byte_rate")]
    assert [
        "producer_byte_rate",
        "<default>",
        "<default>",
        "4,000",
        "6,000",
        "0.0%",
        "0",
        "5",
        "4",
    ] in cells
    assert [
        "producer_byte_rate",
        "<default>",
        "-",
        "5,000",
        "7,500",
        "0.0%",
        "0",
        "6",
        "3",
    ] in cells
    assert (
        "--add-config producer_byte_rate=6000 --entity-type users --entity-default "
        "--entity-type clients --entity-default" in out
    )
    assert "--add-config producer_byte_rate=10500 --entity-type clients --entity-default" in out
    assert "--add-config producer_byte_rate=7500 --entity-type users --entity-name alice\n" in out
