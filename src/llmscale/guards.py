"""Guards every policy gets, applied the same way after ``decide``.

A guard sees the policy's proposal and the signals and may change the
number, saying why. They are ordered; the first that changes the proposal is
named in the decision log (later ones may still clamp it further).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmscale.errors import ConfigError
from llmscale.types import Decision, Signals

__all__ = ["GuardConfig", "GuardOutcome", "apply_guards"]


@dataclass(frozen=True)
class GuardConfig:
    min_replicas: int = 1
    max_replicas: int = 100
    #: never shrink while a serving replica's scrape failed or the policy had no data
    hold_on_missing_data: bool = True

    def __post_init__(self) -> None:
        if self.min_replicas < 0:
            raise ConfigError(f"min_replicas = {self.min_replicas}, must be >= 0")
        if self.max_replicas < self.min_replicas:
            raise ConfigError(
                f"max_replicas = {self.max_replicas}, must be >= min_replicas ({self.min_replicas})"
            )


@dataclass(frozen=True)
class GuardOutcome:
    desired: int
    guard: str | None
    note: str


def apply_guards(decision: Decision, signals: Signals, cfg: GuardConfig) -> GuardOutcome:
    """Bound and sanity-check a proposal. Post: min_replicas <= desired <= max_replicas."""
    current = signals.fleet.spec_replicas
    desired = decision.desired
    guard: str | None = None
    note = ""
    if cfg.hold_on_missing_data and desired < current:
        if signals.unknown_replicas > 0:
            desired, guard = current, "hold-on-missing-data"
            note = f"{signals.unknown_replicas} serving replica(s) unscraped: load unknown, not zero"
        elif decision.rule == "no-metrics":
            desired, guard = current, "hold-on-missing-data"
            note = "policy had no metrics"
    if desired < cfg.min_replicas:
        note = note or f"{desired} < min_replicas {cfg.min_replicas}"
        guard = guard or "bounds"
        desired = cfg.min_replicas
    elif desired > cfg.max_replicas:
        note = note or f"{desired} > max_replicas {cfg.max_replicas}"
        guard = guard or "bounds"
        desired = cfg.max_replicas
    return GuardOutcome(desired, guard, note)
