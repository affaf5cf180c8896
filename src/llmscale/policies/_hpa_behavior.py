"""Shared by the peer policies: the Kubernetes HPA ``behavior`` section and the peers' guard switches.

:func:`apply_hpa_behavior` is the part of the HPA controller that turns one
unstabilised recommendation into the replica count it writes, re-implemented
from kubernetes/kubernetes ``pkg/controller/podautoscaler/horizontal.go``
(``stabilizeRecommendationWithBehaviors``, ``convertDesiredReplicasWithBehaviorRate``)
with the defaults of ``pkg/apis/autoscaling/v2/defaults.go``:

- stabilisation: the result starts at the current replicas, is raised to the
  *lowest* recommendation of the scale-up window (default 0 s) and lowered
  to the *highest* recommendation of the scale-down window (default 300 s,
  the controller flag ``--horizontal-pod-autoscaler-downscale-stabilization``);
  the window is seeded with the current replicas when the HPA first sees the
  target (``recordInitialRecommendation``), so a new HPA cannot shrink at once;
- rate policies relative to the replicas at the start of the period
  (current - added + removed within the period): scale-up "4 pods or 100 %
  per 15 s, whichever allows more"; scale-down "100 % per 15 s";
- min/max replicas bound the result.

Both ``hpa-gpu-util`` (the HPA on a Pods metric) and ``keda-queue`` (the HPA
KEDA creates for an External metric) call it, so the behaviour lives once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from llmscale.errors import ConfigError
from llmscale.policies.params import DURATION_RANGE, param

__all__ = [
    "PEER_GUARD_OVERRIDES",
    "HpaBehavior",
    "HpaState",
    "apply_hpa_behavior",
    "check_non_negative",
    "check_positive",
    "clamp",
]

#: Guard settings every peer policy declares (``guard_overrides``). The peers re-implement their own
#: project's timing natively inside ``decide`` (HPA/KEDA stabilisation windows, Knative's panic ratchet,
#: Ray's delays, WVA's transition block, Dynamo's "scaling in progress" check), so llmscale's generic
#: additions that the real project does not have are switched off: the pending-aware scale-up cap
#: (capacity already starting) and the safe-scale-down KV headroom check (seed 002 5.4). The generic
#: time-based guards (confirmation, cooldowns, stabilisation, rate limits) are already off by default.
#: Left on, as for every policy: hold-on-missing-data, drain-aware scale-down and the bounds -- the
#: safety net llmscale gives every policy, peers included.
PEER_GUARD_OVERRIDES: Mapping[str, Any] = MappingProxyType(
    {"pending_aware": False, "headroom_max_usage": None}
)


def clamp(n: int, lo: int, hi: int) -> int:
    """``n`` bounded to ``[lo, hi]``. Pre: ``lo <= hi``."""
    return max(lo, min(hi, n))


def check_positive(policy: str, **values: float) -> None:
    """Raise ConfigError naming the first parameter that is not > 0 (NaN included)."""
    for name, v in values.items():
        if not v > 0:
            raise ConfigError(f"{policy}: {name} = {v}, must be > 0")


def check_non_negative(policy: str, **values: float) -> None:
    """Raise ConfigError naming the first parameter that is not >= 0 (NaN included)."""
    for name, v in values.items():
        if not v >= 0:
            raise ConfigError(f"{policy}: {name} = {v}, must be >= 0")


@dataclass(frozen=True)
class HpaBehavior:
    """``spec.behavior`` of an autoscaling/v2 HPA; the defaults are Kubernetes' (see module docstring)."""

    up_stabilization_s: float = 0.0
    #: the one behaviour field a policy built on it (keda-queue) declares as its parameter
    down_stabilization_s: float = param(300.0, DURATION_RANGE, unit="s")
    up_pods_per_period: int = 4
    up_percent_per_period: float = 100.0
    down_percent_per_period: float = 100.0
    period_s: float = 15.0


@dataclass(frozen=True)
class HpaState:
    #: (time_s, unstabilised recommendation), newest last
    recommendations: tuple[tuple[float, int], ...] = ()
    #: (time_s, replica change) of scale events, for the rate policies
    events: tuple[tuple[float, int], ...] = ()


def apply_hpa_behavior(
    raw: int,
    current: int,
    rule: str,
    behavior: HpaBehavior,
    min_replicas: int,
    max_replicas: int,
    state: HpaState,
    now_s: float,
) -> tuple[int, str, HpaState]:
    """Stabilise, rate-limit and bound the raw recommendation ``raw`` at ``now_s``.

    Returns (desired replicas, rule, next state); ``rule`` is the caller's rule
    unless stabilisation or a rate policy changed the number. Worked example
    (``tests/policies/test_hpa.py``): from 2 replicas a raw recommendation of
    20 is capped at max(2 + 4, 2 x 2) = 6 in the first 15 s period.
    """
    b = behavior
    keep_s = max(b.up_stabilization_s, b.down_stabilization_s)
    # Like the controller's recordInitialRecommendation: the window starts holding the
    # replicas the target had when the HPA first saw it, so it cannot shrink at once.
    history = state.recommendations or ((now_s, current),)
    older = tuple(r for r in history if now_s - r[0] < keep_s)
    # A stored recommendation counts while it is strictly inside its window (a 0 s window
    # holds only the recommendation just made).
    up_rec = min([raw, *(n for t, n in older if now_s - t < b.up_stabilization_s)])
    down_rec = max([raw, *(n for t, n in older if now_s - t < b.down_stabilization_s)])
    recs = (*older, (now_s, raw))
    stabilized = current
    if stabilized < up_rec:
        stabilized = up_rec
    if stabilized > down_rec:
        stabilized = down_rec
    if stabilized != raw:
        rule = "scale-down-stabilized" if raw < stabilized else "scale-up-stabilized"

    # Rate policies relative to the replicas at the start of the period.
    events = tuple(e for e in state.events if now_s - e[0] < b.period_s)
    added = sum(d for _, d in events if d > 0)
    removed = -sum(d for _, d in events if d < 0)
    start = current - added + removed
    desired = stabilized
    if desired > current:
        limit = max(start + b.up_pods_per_period, math.ceil(start * (1 + b.up_percent_per_period / 100)))
        if desired > limit:
            desired = limit
            rule = "scale-up-rate-limited"
    elif desired < current:
        limit = int(start * (1 - b.down_percent_per_period / 100))
        if desired < limit:
            desired = limit
            rule = "scale-down-rate-limited"
    desired = clamp(desired, min_replicas, max_replicas)
    if desired != current:
        events = (*events, (now_s, desired - current))
    return desired, rule, HpaState(recommendations=recs, events=events)
