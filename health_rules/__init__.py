"""Client health rules, defined once for Prometheus and the lake.

A leaf package: the data (``rules.toml``) and its parser, importing neither
``telemetry`` nor ``spark_jobs``, so the CLI, the rollups and the report
read the same rules. ``promql`` renders them as Prometheus alerting rules.
"""

from __future__ import annotations

from health_rules.model import (
    AGGREGATIONS,
    DERIVED_METRICS,
    OPERATORS,
    SEVERITIES,
    KnownBad,
    Rule,
    RulesError,
    RuleSet,
    load_rules,
    parse_rules,
)
from health_rules.versions import parse_version, software_is_known_bad

__all__ = [
    "AGGREGATIONS",
    "DERIVED_METRICS",
    "OPERATORS",
    "SEVERITIES",
    "KnownBad",
    "Rule",
    "RuleSet",
    "RulesError",
    "load_rules",
    "parse_rules",
    "parse_version",
    "software_is_known_bad",
]
