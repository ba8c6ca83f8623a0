"""`kip714 rollup --config FILE`: the server's [lake] becomes the job's catalog arguments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.lake import Lake
from telemetry.cli.rollup_args import RollupConfigError, rollup_argv
from tests.spark_jobs.lake_writer import append_rows
from tests.spark_jobs.support import at, point


def test_lake_keys_become_arguments_and_the_command_line_wins(tmp_path: Path) -> None:
    config = tmp_path / "kip714.toml"
    config.write_text(
        '[lake]\ncatalog = { type = "sql", uri = "sqlite:////srv/lake/c.db" }\n'
        'warehouse = "/srv/lake/wh"\nnamespace = "prod"\n'
    )
    assert rollup_argv(["--config", str(config), "--namespace", "x", "--windows", "1h"]) == [
        "--namespace", "x", "--windows", "1h",
        "--catalog-uri", "sqlite:////srv/lake/c.db", "--warehouse", "/srv/lake/wh",
    ]  # fmt: skip
    config.write_text("[telemetry]\nmax_bytes = 1024\n")
    assert rollup_argv([f"--config={config}", "--data-dir", "d"]) == ["--data-dir", "d"]


def test_a_catalog_the_job_cannot_read_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "kip714.toml"
    config.write_text('[lake]\ncatalog = { type = "rest", uri = "http://catalog:8181" }\n')
    with pytest.raises(RollupConfigError, match="SQL catalog on SQLite"):
        rollup_argv(["--config", str(config)])


def test_kip714_rollup_reads_the_lake_the_config_names(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "elsewhere" / "c.db"), str(tmp_path / "elsewhere" / "wh"), "prod")
    append_rows(lake, [point(time=at(0, 1))])
    config = tmp_path / "kip714.toml"
    config.write_text(
        f'[lake]\ncatalog = {{ type = "sql", uri = "{lake.sqlalchemy_uri}" }}\n'
        f'warehouse = "{lake.warehouse_uri}"\nnamespace = "prod"\n'
    )
    command = [sys.executable, "-m", "telemetry", "rollup", "--config", str(config),
               "--from", "2020-01-01T00:00", "--to", "2020-01-01T01:00"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr == (
        "kip714 rollup: error: no landing data between 2020-01-01T00:00Z and "
        "2020-01-01T01:00Z in kip714.prod.metrics\n"
    )


def test_the_configs_alert_rules_reach_the_rollup_and_a_bad_file_stops_it(tmp_path: Path) -> None:
    config = tmp_path / "kip714.toml"
    config.write_text('[alerts]\nrules = "mine.toml"\n')
    argv = rollup_argv(["--config", str(config)], alert_rules=True)
    assert argv[:2] == ["--alert-rules", str(tmp_path / "mine.toml")]
    assert "--alert-rules" not in rollup_argv(["--config", str(config)])  # kip714 report's
    (tmp_path / "mine.toml").write_text('[[rule]]\nname = "x"\n')
    command = [sys.executable, "-m", "telemetry", "rollup", "--config", str(config)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]  # argparse: the usage, then the error
    assert last.startswith("kip714 rollup: error: ") and "missing key 'aggregation'" in last
