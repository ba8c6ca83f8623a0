"""Each package's ``__all__`` is exactly its public names (the httpx pattern)."""

from __future__ import annotations

import importlib
import types

import pytest

import quotas


@pytest.mark.parametrize("package", ["quotas", "telemetry", "exporters", "spark_jobs"])
def test_all_lists_exactly_the_public_names(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(module.__all__)
    # dir(), not vars(): spark_jobs loads its names on first use (PEP 562).
    public = {
        name
        for name in dir(module)
        if not name.startswith("_")
        and not isinstance(getattr(module, name), types.ModuleType)
        and name != "annotations"
    }
    assert public == exported
    assert list(module.__all__) == sorted(module.__all__, key=lambda n: (not n.isupper(), n))


def test_design_api_names_are_importable_from_quotas() -> None:
    for name in (
        "Quota", "MetricConfig", "WindowedSum", "WindowedCount", "Avg", "Max", "Min",
        "CumulativeSum", "Rate", "TokenBucket", "Sensor", "QuotaViolationError",
        "throttle_time_ms", "bounded_throttle_time_ms", "DEFAULT", "ClientQuotaManager",
        "RequestQuotaManager", "ControllerMutationQuotaManager", "ConnectionQuotas",
        "TooManyConnectionsError", "ConnectionThrottledError", "ThrottlingQuotaExceededError",
        "Metrics",
    ):  # fmt: skip
        assert name in quotas.__all__
        assert getattr(quotas, name) is not None
