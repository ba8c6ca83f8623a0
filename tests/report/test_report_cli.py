"""``kip714 report``: the period it names, its exit codes, and an --out that creates nothing."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from report import main
from tests.report.lake_tables import T0, write_tables

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

INSTANCE = "AAAAAAAAAAAAAAAAAAAAAQ"


def _tables(data_dir: Path) -> None:
    health = [
        {
            "window_start": T0 + dt.timedelta(hours=h),
            "window_end": T0 + dt.timedelta(hours=h + 1),
            "client_id": "c",
            "client_instance_id": INSTANCE,
            "client_type": "producer",
            "request_latency_p99_ms": 5.0,
        }
        for h in (0, 2)
    ]
    gauges = [
        {
            "window_start": T0 + dt.timedelta(hours=2, minutes=30),
            "window_end": T0 + dt.timedelta(hours=2, minutes=31),
            "metric_name": "org.apache.kafka.producer.node.request.latency.avg",
            "client_instance_id": INSTANCE,
            "count": 1,
            "p99": 1.0,
        }
    ]
    write_tables(data_dir, health, gauges)


def test_without_a_range_the_period_is_the_data_s_first_and_last_hour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tables(tmp_path / "data")
    out = tmp_path / "r.html"
    assert main(["--data-dir", str(tmp_path / "data"), "--out", str(out)]) == 0
    html = out.read_text()
    assert "2026-11-25 10:00 UTC to 2026-11-25 12:00 UTC (the data&#x27;s first and last hour)" in (
        html
    )
    assert "the beginning" not in html
    asked = ["--from", "2026-11-25T11:00", "--to", "2026-11-25T13:00"]
    assert main(["--data-dir", str(tmp_path / "data"), "--out", str(out), *asked]) == 0
    assert "2026-11-25 11:00 UTC to 2026-11-25 13:00 UTC" in out.read_text()
    capsys.readouterr()
    # Tables present, nothing in the range: the report is written and stderr says so.
    empty = ["--from", "2027-01-01T00:00", "--to", "2027-01-02T00:00"]
    assert main(["--data-dir", str(tmp_path / "data"), "--out", str(out), *empty]) == 0
    assert "no rows in this range" in capsys.readouterr().err
    assert "0 client instance(s)" in out.read_text()


def test_no_rollup_tables_is_exit_2_with_the_hint_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    out = tmp_path / "r.html"
    assert main(["--data-dir", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"kip714 report: no rollup tables in {data} (run kip714 rollup first)"
    assert not out.exists()


def test_out_never_creates_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _tables(tmp_path / "data")
    out = tmp_path / "nonexistent" / "deeper" / "r.html"
    assert main(["--data-dir", str(tmp_path / "data"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "is not created" in err
    assert not (tmp_path / "nonexistent").exists()
