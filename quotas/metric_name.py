"""Metric names: a name, a group and ordered tags (Kafka's ``MetricName``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetricName:
    """Identifies one metric; tags keep their order, as Kafka's ``LinkedHashMap`` does."""

    name: str
    group: str = ""
    tags: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, name: str, group: str = "", tags: Mapping[str, str] | None = None) -> MetricName:
        return cls(name, group, tuple(tags.items()) if tags else ())

    @property
    def tag_map(self) -> dict[str, str]:
        return dict(self.tags)

    def __str__(self) -> str:
        tags = ", ".join(f"{k}={v}" for k, v in self.tags)
        return f"{self.group}:{self.name}{{{tags}}}" if self.group else self.name
