"""Shared fixtures for the quota core.

Kafka's tests run on ``MockTime`` starting at the real wall clock, not 0:
the token bucket and the sampled stats start from "last update = 0", so a
clock at 0 would make first calls behave unlike a real broker's.
"""

from __future__ import annotations

#: A realistic epoch start, as Kafka's ``MockTime``.
T0 = 1_700_000_000_000
