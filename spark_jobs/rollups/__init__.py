"""Pure DataFrame → DataFrame rollups over landing rows (no I/O, no session)."""

from __future__ import annotations

from spark_jobs.rollups._common import (
    CLIENT_COLUMNS,
    KEY_COLUMNS,
    parse_window,
    prepare_points,
    window_label,
)
from spark_jobs.rollups._cumulative import DEFAULT_LOOKBACK
from spark_jobs.rollups.alerts import ALERTS_SCHEMA, alert_points, client_alerts, push_times
from spark_jobs.rollups.coverage import unrolled_points
from spark_jobs.rollups.gauges import GAUGE_QUANTILES, exact_quantile, gauge_rollup
from spark_jobs.rollups.health import HEALTH_METRICS, client_health
from spark_jobs.rollups.histograms import bucket_quantile, cumulative_counts, histogram_rollup
from spark_jobs.rollups.inventory import INVENTORY_COLUMNS, client_inventory
from spark_jobs.rollups.quota_advice import QUOTA_ADVICE_COLUMNS, quota_advice
from spark_jobs.rollups.ranking import top_n
from spark_jobs.rollups.sums import sum_rollup

__all__ = [
    "ALERTS_SCHEMA",
    "CLIENT_COLUMNS",
    "DEFAULT_LOOKBACK",
    "GAUGE_QUANTILES",
    "HEALTH_METRICS",
    "INVENTORY_COLUMNS",
    "KEY_COLUMNS",
    "QUOTA_ADVICE_COLUMNS",
    "alert_points",
    "bucket_quantile",
    "client_alerts",
    "client_health",
    "client_inventory",
    "cumulative_counts",
    "exact_quantile",
    "gauge_rollup",
    "histogram_rollup",
    "parse_window",
    "prepare_points",
    "push_times",
    "quota_advice",
    "sum_rollup",
    "top_n",
    "unrolled_points",
    "window_label",
]
