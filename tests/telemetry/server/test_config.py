"""Settings: embedded defaults, TOML replacing them, flags on top, one clear error per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from telemetry.errors import ConfigError
from telemetry.server.config import load_settings, settings_from_mapping
from telemetry.toml_checks import parse_host_port


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kip714.toml"
    path.write_text(text)
    return path


def test_embedded_defaults_need_no_file() -> None:
    settings = load_settings()
    assert (settings.kafka.host, settings.kafka.port) == ("127.0.0.1", 9092)
    assert (settings.http_host, settings.http_port) == ("127.0.0.1", 8714)
    assert settings.data_dir == Path("./kip714-data")
    assert settings.log_dir == Path("./kip714-data/log")
    assert [s.name for s in settings.subscriptions] == ["default"]
    assert settings.subscriptions[0].metrics == ("org.apache.kafka.",)
    assert settings.subscriptions[0].interval_ms == 60_000
    assert [(e.name, e.type) for e in settings.exporters] == [("landing", "iceberg")]
    assert settings.telemetry.max_bytes == 1_048_576
    telemetry = settings.telemetry
    assert (
        telemetry.max_resources_per_request,
        telemetry.max_scopes_per_resource,
        telemetry.max_resource_bytes,
        telemetry.max_attribute_value_bytes,
        telemetry.identity_cache_max_bytes,
    ) == (1000, 1000, 64 * 1024, 16 * 1024, 64 * 1024 * 1024)
    assert settings.http.decode_threads == 2
    assert settings.config_path is None


def test_a_file_replaces_the_parts_it_states(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
data_dir = "/var/lib/kip714"
[telemetry]
max_bytes = 2048
instance_cache_size = 10
max_resources_per_request = 5000
identity_cache_max_bytes = 1048576
[kafka]
listen = "0.0.0.0:19092"
advertised = "kip714.example:9092"
[http]
listen = "[::1]:0"
[subscriptions.producers]
metrics = ["org.apache.kafka.producer."]
"interval.ms" = 1000
match = ["client_software_name=confluent-kafka-.*"]
[subscriptions.everything]
metrics = "*"
""",
    )
    settings = load_settings(path)
    assert settings.config_path == path
    assert settings.telemetry.max_bytes == 2048
    assert settings.telemetry.instance_cache_size == 10
    assert settings.telemetry.max_resources_per_request == 5000
    assert settings.telemetry.identity_cache_max_bytes == 1048576
    assert settings.telemetry.max_scopes_per_resource == 1000  # a default
    assert (settings.kafka.host, settings.kafka.port) == ("0.0.0.0", 19092)
    assert (settings.kafka.advertised_host, settings.kafka.advertised_port) == (
        "kip714.example",
        9092,
    )
    assert (settings.http_host, settings.http_port) == ("::1", 0)
    assert [s.name for s in settings.subscriptions] == ["producers", "everything"]
    producers = settings.subscriptions[0]
    assert producers.interval_ms == 1000
    assert producers.match["client_software_name"].pattern == "confluent-kafka-.*"
    assert settings.subscriptions[1].metrics == ("*",)
    # No [exporters]: the default exporter stays, under the file's data_dir.
    assert settings.exporters[0].options == {"path": "/var/lib/kip714"}


def test_exporters_table(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[exporters.debug]
type = "jsonl"
batch_max_records = 50
[exporters.debug.options]
path = "/tmp/out"
fsync = true
""",
    )
    landing, exporter = load_settings(path).exporters
    assert (landing.name, landing.type) == ("landing", "iceberg")  # exporters add to it
    assert exporter.name == "debug"
    assert exporter.type == "jsonl"
    assert exporter.batch_max_records == 50
    assert exporter.options == {"path": "/tmp/out", "fsync": True}


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[kafka]\nlisten = "127.0.0.1:1111"\n')
    settings = load_settings(
        path, data_dir=tmp_path / "d", kafka_listen="127.0.0.1:0", http_listen="127.0.0.1:0"
    )
    assert settings.kafka.port == 0
    assert settings.http_port == 0
    assert settings.data_dir == tmp_path / "d"
    assert settings.exporters[0].options == {"path": str(tmp_path / "d")}


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ('[kafka]\nlisen = "x"', "kafka.lisen", "x"),
        ("bogus = 1", "bogus", 1),
        ('[kafka]\nlisten = "nohostport"', "kafka.listen", "nohostport"),
        ('[kafka]\nlisten = "h:99999"', "kafka.listen", "h:99999"),
        ("[telemetry]\nmax_bytes = 0", "telemetry.max_bytes", 0),
        ('[telemetry]\nmax_bytes = "big"', "telemetry.max_bytes", "big"),
        ("[telemetry]\nmax_resources_per_request = 0", "telemetry.max_resources_per_request", 0),
        ("[telemetry]\nmax_scopes_per_resource = -1", "telemetry.max_scopes_per_resource", -1),
        ('[telemetry]\nmax_resource_bytes = "64k"', "telemetry.max_resource_bytes", "64k"),
        ("[telemetry]\nmax_attribute_value_bytes = 0", "telemetry.max_attribute_value_bytes", 0),
        ("[telemetry]\nidentity_cache_max_bytes = 0", "telemetry.identity_cache_max_bytes", 0),
        ("[telemetry]\nmax_resources = 5", "telemetry.max_resources", 5),
        ("[http]\ndecode_threads = 0", "http.decode_threads", 0),
        ("[http]\ndecode_threads = 65", "http.decode_threads", 65),
        ("[log]\nsegment_bytes = 10\nmax_bytes = 15", "log.segment_bytes", 10),
        ("[log]\nmax_pending_decoded_bytes = 1000", "log.max_pending_decoded_bytes", 1000),
        ('[subscriptions.s]\n"interval.ms" = 50', "subscriptions.s", None),
        ('[subscriptions.s]\nmatch = ["nokey=.*"]', "subscriptions.s", None),
        ('[subscriptions.s]\nmetrics = ["a"]\ncolour = "red"', "subscriptions.s", None),
        ("[exporters.e]\nbatch_max_records = 5", "exporters.e.type", None),
        ('[exporters.e]\ntype = "jsonl"\nqueue = 1', "exporters.e.queue", 1),
    ],
)
def test_errors_name_the_key_and_the_value(
    tmp_path: Path, text: str, key: str, value: object
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text))
    assert caught.value.key == key
    assert str(caught.value).startswith(f"{key}: invalid value")
    if value is not None:
        assert caught.value.value == value


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(write(tmp_path, "[kafka\n"))


def test_interval_out_of_range_says_so() -> None:
    with pytest.raises(ConfigError, match="interval must be between 100 and 3600000"):
        settings_from_mapping(
            {"subscriptions": {"s": {"metrics": ["*"], "interval.ms": 3_600_001}}}
        )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9092", ("127.0.0.1", 9092)), ("[::1]:0", ("::1", 0)), ("host:1", ("host", 1))],
)
def test_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port("k", text) == expected


def test_data_dir_moves_every_builtin_exporter_without_a_path(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
data_dir = "/var/lib/kip714"
[exporters.landing]
[exporters.kept]
type = "iceberg"
[exporters.kept.options]
path = "/srv/kept"
[exporters.lines]
type = "jsonl"
[exporters.plugin]
type = "third-party"
""",
    )
    from_file = {e.name: dict(e.options) for e in load_settings(path).exporters}
    assert from_file == {
        "landing": {"path": "/var/lib/kip714"},
        "kept": {"path": "/srv/kept"},
        "lines": {"path": "/var/lib/kip714/jsonl/lines.jsonl"},
        "plugin": {},
    }
    moved = {e.name: dict(e.options) for e in load_settings(path, data_dir="/d").exporters}
    assert moved == {
        "landing": {"path": "/d"},
        "kept": {"path": "/srv/kept"},
        "lines": {"path": "/d/jsonl/lines.jsonl"},
        "plugin": {},
    }


@pytest.mark.parametrize(
    ("text", "kafka_listen", "value"),
    [
        ('[kafka]\nlisten = "0.0.0.0:9092"\n', None, None),
        ("", "0.0.0.0:9092", None),
        ("", "[::]:0", None),
        ('[kafka]\nadvertised = "0.0.0.0:9092"\n', None, "0.0.0.0:9092"),
        ('[kafka]\nlisten = "0.0.0.0:9092"\nadvertised = "[::]:9092"\n', None, "[::]:9092"),
    ],
)
def test_an_unspecified_advertised_address_is_refused(
    tmp_path: Path, text: str, kafka_listen: str | None, value: str | None
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), kafka_listen=kafka_listen)
    assert caught.value.key == "kafka.advertised"
    assert caught.value.value == value


def test_listening_everywhere_with_an_advertised_host_is_fine(tmp_path: Path) -> None:
    settings = load_settings(
        write(tmp_path, '[kafka]\nadvertised = "kip714.example:9092"\n'), kafka_listen="0.0.0.0:0"
    )
    assert (settings.kafka.host, settings.kafka.advertised_host) == ("0.0.0.0", "kip714.example")


def test_alert_rules_are_relative_to_the_file_and_checked_at_start(tmp_path: Path) -> None:
    assert load_settings().alert_rules is None
    (tmp_path / "mine.toml").write_text(
        '[[rule]]\nname = "mine"\nmetric = "m"\naggregation = "last"\nop = ">"\nthreshold = 1\n'
        'for_s = 0\nseverity = "info"\nmeaning = "m above 1"\n'
    )
    assert load_settings(write(tmp_path, '[alerts]\nrules = "mine.toml"\n')).alert_rules == (
        tmp_path / "mine.toml"
    )
    (tmp_path / "mine.toml").write_text('[[rule]]\nname = "mine"\n')
    with pytest.raises(ConfigError, match=r"alerts\.rules.*missing key 'aggregation'"):
        load_settings(write(tmp_path, '[alerts]\nrules = "mine.toml"\n'))
    with pytest.raises(ConfigError, match=r"alerts\.rule"):
        load_settings(write(tmp_path, '[alerts]\nrule = "mine.toml"\n'))
