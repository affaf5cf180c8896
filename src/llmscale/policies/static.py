"""``static``: a fixed number of replicas — the baseline every autoscaler must beat."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.deployment import Deployment
from llmscale.policies.base import register
from llmscale.policies.params import COUNT_MAX, Param
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


_PARAMS = {
    "replicas": Param(None, f"[0, {COUNT_MAX}]", kind=int, help="replicas (default: the initial replicas)"),
}


@register("static", "a fixed replica count (--replicas); the baseline", _PARAMS)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> StaticPolicy:
    n = params["replicas"]
    if n is None:
        n = ctx.initial_replicas
    return StaticPolicy(replicas=int(n))
