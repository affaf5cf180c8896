"""The MetricSource protocol, defined by its consumer (the controller)."""

from __future__ import annotations

from typing import Protocol

from llmscale.types import Observation

__all__ = ["MetricSource"]


class MetricSource(Protocol):
    def observe(self, now_s: float) -> Observation:
        """Scrape at ``now_s``. Never raises on a partial scrape: failed replicas come back with ok=False."""
        ...
