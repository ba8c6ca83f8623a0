"""`kip714 alerts prometheus`: rules promtool accepts, each firing on the data that breaks it.

``promtool test rules`` (Debian's prometheus package) evaluates every
generated rule over two instances' series: one whose data breaks the rule
and one whose data does not; only the first may alert, with the rule's
labels and annotations.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from health_rules import Rule, RuleSet, load_rules
from health_rules.promql import LAST_PUSH, PUSH_INTERVAL, prometheus_name, rule_expressions

MINUTES = 20  # series length and evaluation time, in one-minute steps


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "Debian's prometheus package (promtool) is needed (.ci/run installs it)"
    return subprocess.run(
        [binary, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def _alerts(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "telemetry", "alerts", "prometheus", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _values(rule: Rule, fire: bool) -> float:
    """A constant value that breaks ``rule`` (``fire``) or does not."""
    t = rule.threshold
    for candidate in (t + 1, t * 2 + 1, t - 1, t / 2, t * 0.5 - 1, t):
        if rule.holds(candidate) == fire and candidate >= 0:
            return candidate
    raise AssertionError(f"no value {'breaks' if fire else 'keeps'} {rule}")


def _go_float(value: float) -> str:
    """How Go's text/template prints a float64 ``{{ $value }}`` (%v: shortest 'g', no '+')."""
    return str(int(value)) if value.is_integer() else repr(value)


def _identity(instance: str, software: str = "2.16.1-rdkafka-2.16.0") -> dict[str, str]:
    return {
        "client_id": "c",
        "client_instance_id": instance,
        "client_software_name": "confluent-kafka-python",
        "client_software_version": software,
        "principal": "User:ANONYMOUS",
    }


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ",".join(f"{key}={json.dumps(value)}" for key, value in sorted(labels.items()))
    return {"series": f"{name}{{{body}}}", "values": values}


def _case(rule: Rule, rules: RuleSet) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """Input series for one firing and one calm instance, and the alerts expected."""
    annotations = {"summary": rule.meaning, "kip714_metric": rule.metric}
    if rule.metric == "kip714.client.push_age_intervals":
        # Pushed every 10 s; "fire" last pushed at minute 1, "calm" 10 s before the evaluation.
        end = (MINUTES - 1) * 60  # the evaluation time
        series = [
            _series(LAST_PUSH, _identity("fire"), f"60x{MINUTES}"),
            _series(PUSH_INTERVAL, _identity("fire"), f"10x{MINUTES}"),
            _series(LAST_PUSH, _identity("calm"), f"{end - 10}x{MINUTES}"),
            _series(PUSH_INTERVAL, _identity("calm"), f"10x{MINUTES}"),
        ]
        value = (end - 60) / 10
        labels = _identity("fire")
        description = f"{rule.meaning} Value: {_go_float(value)}."
        return series, [_expected(rule, labels, {**annotations, "description": description})]
    if rule.metric == "kip714.client.software_known_bad":
        series, expected = [], []
        for index, entry in enumerate(rules.known_bad):
            low = entry.first
            high = [int(part) for part in entry.last.split(".")]
            above = f"{high[0]}.{high[1]}.{high[2] + 1}"
            bad = _identity(f"fire{index}", f"9.9.9-rdkafka-{low}")
            series += [
                _series(LAST_PUSH, bad, f"60x{MINUTES}"),
                _series(
                    LAST_PUSH, _identity(f"calm{index}", f"9.9.9-rdkafka-{above}"), f"60x{MINUTES}"
                ),
            ]
            description = f"{rule.meaning} Reason: {entry.reason} Value: 1."
            expected.append(_expected(rule, bad, {**annotations, "description": description}))
        return series, expected
    name = prometheus_name(rule.metric).replace("*", "producer")
    fire, calm = _values(rule, True), _values(rule, False)
    labels = {**_identity("fire"), "node_id": "1"}
    series = [
        _series(name, labels, f"{fire}x{MINUTES}"),
        _series(name, {**_identity("calm"), "node_id": "1"}, f"{calm}x{MINUTES}"),
    ]
    description = f"{rule.meaning} Value: {_go_float(fire)}."
    return series, [_expected(rule, labels, {**annotations, "description": description})]


def _expected(rule: Rule, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "exp_labels": {**labels, "severity": rule.severity},
        "exp_annotations": annotations,
    }


def test_every_shipped_rule_passes_promtool_and_fires_only_where_it_should(tmp_path: Path) -> None:
    rules_file = tmp_path / "kip714-rules.yml"
    made = _alerts("--out", str(rules_file))
    assert made.returncode == 0, made.stderr
    checked = _promtool("check", "rules", rules_file)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = load_rules()
    expressions = sum(len(rule_expressions(rule, rules)) for rule in rules.rules)
    assert f"SUCCESS: {expressions} rules found" in checked.stdout

    tests = []
    for rule in rules.rules:
        series, expected = _case(rule, rules)
        tests.append(
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": f"{MINUTES - 1}m", "alertname": rule.name, "exp_alerts": expected}
                ],
            }
        )
    unit = tmp_path / "kip714-rules-test.yml"
    # JSON is YAML: promtool reads the test file as written here.
    unit.write_text(json.dumps({"rule_files": [rules_file.name], "tests": tests}, indent=1))
    tested = _promtool("test", "rules", unit)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_a_rule_that_should_not_fire_makes_promtool_fail(tmp_path: Path) -> None:
    """The unit test above can fail: expecting an alert on calm data is reported as a failure."""
    rules_file = tmp_path / "kip714-rules.yml"
    assert _alerts("--out", str(rules_file)).returncode == 0
    rule = load_rules().rule("produce_throttled")
    name = prometheus_name(rule.metric)
    unit = tmp_path / "unit.yml"
    test = {
        "interval": "1m",
        # Throttled but for one minute in the window: min_over_time is 0, no alert.
        "input_series": [_series(name, _identity("calm"), "5 5 5 5 5 5 0 5 5 5 5")],
        "alert_rule_test": [
            {
                "eval_time": "10m",
                "alertname": rule.name,
                "exp_alerts": [_expected(rule, _identity("calm"), {})],
            }
        ],
    }
    unit.write_text(json.dumps({"rule_files": [rules_file.name], "tests": [test]}))
    tested = _promtool("test", "rules", unit)
    assert tested.returncode != 0
    assert "produce_throttled" in tested.stdout + tested.stderr


def test_the_config_names_the_rules_file_relative_to_itself(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "mine.toml").write_text(
        '[[rule]]\nname = "mine"\nmetric = "m.x"\naggregation = "last"\nop = ">"\n'
        'threshold = 1\nfor_s = 0\nseverity = "info"\nmeaning = "mine fired"\n'
    )
    config = tmp_path / "conf" / "kip714.toml"
    config.write_text('[alerts]\nrules = "mine.toml"\n')
    made = _alerts("--config", str(config))
    assert made.returncode == 0, made.stderr
    assert '- alert: "mine"' in made.stdout
    assert '"m_x > 1"' in made.stdout
    assert "request_latency_high" not in made.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--rules", "/nonexistent/rules.toml"], "cannot read the rules"),
        (["--config", "/nonexistent/kip714.toml"], "cannot read the config"),
    ],
)
def test_a_missing_file_is_one_line_and_exit_2(args: list[str], said: str) -> None:
    made = _alerts(*args)
    assert made.returncode == 2
    assert said in made.stderr and made.stderr.count("\n") == 1
    assert made.stdout == ""
