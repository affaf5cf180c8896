"""``static``: a fixed number of replicas — the baseline every autoscaler must beat."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.errors import ConfigError
from llmscale.policies.base import PolicyContext, register
from llmscale.types import Decision, Signals

__all__ = ["StaticPolicy"]


@dataclass(frozen=True)
class StaticPolicy:
    replicas: int
    name: str = "static"
    tick_s: float = 60.0

    def initial_state(self) -> None:
        return None

    def decide(self, signals: Signals, state: None, now_s: float) -> tuple[Decision, None]:
        return Decision(self.replicas, "fixed", {"replicas": float(self.replicas)}), None


@register("static", "a fixed replica count (--replicas); the baseline", {"replicas": None})
def _make(ctx: PolicyContext, params: Mapping[str, Any]) -> StaticPolicy:
    n = params["replicas"]
    if n is None:
        n = ctx.extra.get("initial_replicas", ctx.min_replicas)
    n = int(n)
    if n < 0:
        raise ConfigError(f"static replicas = {n}, must be >= 0")
    return StaticPolicy(replicas=n)
