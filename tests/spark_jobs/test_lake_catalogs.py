"""The lake's catalog for the rollups: a SQLite file, or any SQLAlchemy PostgreSQL URL."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from spark_jobs import jars
from spark_jobs.lake import Lake
from telemetry.cli.rollup_args import RollupConfigError, rollup_argv

if TYPE_CHECKING:
    from pathlib import Path


def test_a_postgresql_url_becomes_spark_jdbc_settings() -> None:
    lake = Lake(
        "postgresql+psycopg://kip%40ops:p%3Ass@db.example:6543/lake?sslmode=require", "s3a://b/w"
    )
    assert lake.is_postgres
    assert lake.sqlalchemy_uri == lake.catalog_uri  # pyiceberg takes it as given
    assert lake.jdbc_uri == "jdbc:postgresql://db.example:6543/lake?sslmode=require"
    conf = lake.spark_conf()
    assert conf["spark.sql.catalog.kip714.uri"] == lake.jdbc_uri
    assert conf["spark.sql.catalog.kip714.jdbc.user"] == "kip@ops"
    assert conf["spark.sql.catalog.kip714.jdbc.password"] == "p:ss"
    assert "p:ss" not in lake.where and "p%3Ass" not in lake.where
    with pytest.raises(ValueError, match="not a SQLite file"):
        _ = lake.catalog_file
    plain = Lake("postgresql://kip@127.0.0.1/lake", "/w")
    assert plain.jdbc_uri == "jdbc:postgresql://127.0.0.1:5432/lake"
    assert plain.jdbc_properties == {"jdbc.user": "kip"}


def test_a_sqlite_catalog_has_no_jdbc_user(tmp_path: Path) -> None:
    lake = Lake.under(tmp_path)
    assert not lake.is_postgres
    assert lake.jdbc_uri == f"jdbc:sqlite:{tmp_path.resolve()}/lake/catalog.db"
    assert not any(".jdbc.user" in key for key in lake.spark_conf())


@pytest.mark.parametrize(
    "uri",
    [
        "postgresql+psycopg://kip@db/lake",
        "postgresql+psycopg2://kip@db/lake",
        "postgresql://kip@db/lake",
    ],
)
def test_rollup_config_takes_any_postgresql_url(tmp_path: Path, uri: str) -> None:
    config = tmp_path / "kip714.toml"
    config.write_text(f'[lake]\ncatalog = {{ type = "sql", uri = "{uri}" }}\nwarehouse = "/w"\n')
    assert rollup_argv(["--config", str(config)]) == ["--catalog-uri", uri, "--warehouse", "/w"]


def test_rollup_config_refuses_other_databases(tmp_path: Path) -> None:
    config = tmp_path / "kip714.toml"
    config.write_text('[lake]\ncatalog = { type = "sql", uri = "mysql://kip@db/lake" }\n')
    with pytest.raises(RollupConfigError, match="PostgreSQL"):
        rollup_argv(["--config", str(config)])


def test_the_jar_cache_is_named_by_the_jar_list(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "org.postgresql:postgresql:42.7.13" in jars.ICEBERG_PACKAGES
    before = jars.cache_dir()
    monkeypatch.setattr(jars, "ICEBERG_PACKAGES", (*jars.ICEBERG_PACKAGES, "org.example:more:1"))
    assert jars.cache_dir() != before  # a cache filled for fewer jars is never taken
