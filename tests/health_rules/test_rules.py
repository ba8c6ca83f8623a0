"""The rules file: the shipped rules parse, and every mistake is refused naming rule and key."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import health_rules
from health_rules import (
    DERIVED_METRICS,
    KnownBad,
    RulesError,
    load_rules,
    parse_rules,
    software_is_known_bad,
)
from health_rules.versions import library_version, parse_version, version_range_regex

GOOD_RULE = """
[[rule]]
name = "latency"
metric = "org.apache.kafka.*.node.request.latency.max"
aggregation = "max"
op = ">"
threshold = 1000
for_s = 300
severity = "warning"
meaning = "slow"
"""


def test_the_shipped_rules_cover_what_operators_ask_first() -> None:
    rules = load_rules()
    names = {rule.name for rule in rules.rules}
    assert names >= {
        "request_latency_high",
        "produce_throttled",
        "fetch_throttled",
        "connection_churn_high",
        "rebalance_latency_high",
        "poll_idle_ratio_low",
        "record_queue_time_high",
        "software_known_bad",
        "client_stopped_pushing",
    }
    assert {rule.metric for rule in rules.rules} >= set(DERIVED_METRICS)
    [librdkafka] = [entry for entry in rules.known_bad if entry.library == "librdkafka"]
    assert (librdkafka.first, librdkafka.last) == ("2.5.0", "2.10.0")
    assert all(rule.meaning and "\n" not in rule.meaning for rule in rules.rules)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (("op", '">"', '"=>"'), "'op' must be one of"),
        (("aggregation", '"max"', '"p99"'), "'aggregation' must be one of"),
        (("severity", '"warning"', '"page"'), "'severity' must be one of"),
        (("threshold", "1000", '"high"'), "'threshold' must be a number"),
        (("threshold", "1000", "nan"), "'threshold' must be finite"),
        (("for_s", "300", "-1"), "'for_s' must be whole seconds"),
        (("for_s", "300", "0"), "needs a window"),
        (("metric", '"org.apache.kafka.*.node.request.latency.max"', '"*"'), "'metric' is not"),
        (("metric", '"org.apache.kafka.*.node.request.latency.max"', '"a b"'), "'metric' is not"),
        (("metric", '"org.apache.kafka.*.node.request.latency.max"', '"kip714.x"'), "not one of"),
        (("name", '"latency"', '"Latency!"'), "'name' must be lower case"),
        (("meaning", '"slow"', '""'), "'meaning' must be a non-empty string"),
    ],
)
def test_a_bad_value_is_refused_naming_the_rule_and_key(
    change: tuple[str, str, str], named: str
) -> None:
    key, old, new = change
    text = GOOD_RULE.replace(f"{key} = {old}", f"{key} = {new}")
    assert text != GOOD_RULE
    with pytest.raises(RulesError) as refused:
        parse_rules(text, "mine.toml")
    assert named in str(refused.value)
    assert str(refused.value).startswith("mine.toml: [[rule]] #1")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("", "no [[rule]]"),
        ("rule = 1", "must be an array of tables"),
        ("[alerts]\nx = 1", "unknown table 'alerts'"),
        (GOOD_RULE + "extra = 1\n", "unknown key 'extra'"),
        (GOOD_RULE.replace('severity = "warning"\n', ""), "missing key 'severity'"),
        (GOOD_RULE + GOOD_RULE, "two rules are named 'latency'"),
        ("[[rule]\n", "not TOML"),
        (
            GOOD_RULE.replace(
                '"org.apache.kafka.*.node.request.latency.max"',
                '"kip714.client.push_age_intervals"',
            ),
            'takes aggregation = "last" and for_s = 0',
        ),
        (
            GOOD_RULE + '[[known_bad]]\nlibrary = "librdkafka"\nfirst = "2.10"\nlast = "2.11.0"\n'
            'reason = "r"\n',
            "'first' must be a version",
        ),
        (
            GOOD_RULE + '[[known_bad]]\nlibrary = "librdkafka"\nfirst = "2.11.0"\nlast = "2.1.0"\n'
            'reason = "r"\n',
            "is after 'last'",
        ),
        (
            GOOD_RULE + '[[known_bad]]\nlibrary = "kafkajs"\nfirst = "2.1.0"\nlast = "2.2.0"\n'
            'reason = "r"\n',
            "'library' must be one of",
        ),
    ],
)
def test_a_bad_file_is_refused_with_what_is_wrong(text: str, named: str) -> None:
    with pytest.raises(RulesError) as refused:
        parse_rules(text, "mine.toml")
    assert named in str(refused.value)


def test_an_unreadable_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="cannot read the rules"):
        load_rules(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("name", "version", "library", "expected"),
    [
        ("librdkafka", "2.10.0", "librdkafka", (2, 10, 0)),
        ("confluent-kafka-python", "2.16.1-rdkafka-2.16.0", "librdkafka", (2, 16, 0)),
        ("confluent-kafka-go", "2.6.0-rdkafka-2.6.1-RC2", "librdkafka", (2, 6, 1)),
        ("confluent-kafka-python", "2.16.1", "librdkafka", None),
        ("apache-kafka-java", "3.9.0", "librdkafka", None),
        ("apache-kafka-java", "3.9.0", "apache-kafka-java", (3, 9, 0)),
        (None, None, "librdkafka", None),
    ],
)
def test_the_library_a_client_runs_is_read_from_its_software(
    name: str | None, version: str | None, library: str, expected: tuple[int, int, int] | None
) -> None:
    assert library_version(library, name, version) == expected


def test_known_bad_software_is_matched_through_wrappers() -> None:
    bad = (KnownBad("librdkafka", "2.5.0", "2.10.0", "null Metrics"),)
    assert software_is_known_bad("confluent-kafka-python", "2.6.0-rdkafka-2.6.1", bad) == bad[0]
    assert software_is_known_bad("librdkafka", "2.10.0", bad) == bad[0]
    assert software_is_known_bad("librdkafka", "2.10.1", bad) is None
    assert software_is_known_bad("confluent-kafka-python", "2.16.1-rdkafka-2.16.0", bad) is None
    assert software_is_known_bad("apache-kafka-java", "2.6.0", bad) is None


@pytest.mark.parametrize(
    ("first", "last"),
    [
        ("2.5.0", "2.10.0"),
        ("1.9.3", "3.2.1"),
        ("0.0.0", "0.0.0"),
        ("2.5.7", "2.5.12"),
        ("1.2.3", "1.4.0"),
    ],
)
def test_a_version_range_regex_matches_exactly_the_range(first: str, last: str) -> None:
    pattern = re.compile(version_range_regex(first, last))
    low, high = parse_version(first), parse_version(last)
    assert low is not None and high is not None
    for version in itertools.product(range(5), range(13), range(14)):
        text = ".".join(map(str, version))
        assert bool(pattern.fullmatch(text)) == (low <= version <= high), text
        assert bool(pattern.fullmatch(text + "-RC1")) == (low <= version <= high), text
    assert not pattern.fullmatch(f"x{first}")
    assert bool(pattern.fullmatch(f"{high[0]}.{high[1]}.{high[2] + 100}")) is False


def test_the_shipped_rules_load_from_a_zip_as_a_spark_cluster_imports_them(tmp_path: Path) -> None:
    package = Path(health_rules.__file__).parent
    archive = tmp_path / "py-files.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in package.iterdir():
            if path.is_file():
                out.write(path, f"health_rules/{path.name}")
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import health_rules; "
        "assert health_rules.__file__.startswith(sys.argv[1]), health_rules.__file__; "
        "print(len(health_rules.load_rules().rules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(archive)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(load_rules().rules)
