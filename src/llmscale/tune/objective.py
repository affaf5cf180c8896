"""What one trial of ``llmscale tune`` measures: a policy with some parameters over every trace.

A trial backtests the policy (the same :func:`~llmscale.backtest.runner.run_policy` as
``llmscale backtest``, real controller loop, simulated fleet) on each tuning case and adds up:
GPU-hours summed over the traces, SLO attainment as requests that met the SLO over all requests
(so a trace with 10x the requests weighs 10x, as it would in the bill and in the users'
experience). The study minimises the GPU-hours subject to the attainment reaching the target;
:mod:`llmscale.tune.study` states the constraint.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmscale.backtest.runner import BacktestSettings
    from llmscale.workloads.model import Workload

__all__ = ["CaseOutcome", "TrialOutcome", "TuneCase", "evaluate", "params_for"]


@dataclass(frozen=True)
class TuneCase:
    """One trace to tune on: its label, the workload and the backtest settings sized for it."""

    label: str
    workload: Workload
    settings: BacktestSettings


@dataclass(frozen=True)
class CaseOutcome:
    label: str
    requests: int
    met: int
    gpu_hours: float


@dataclass(frozen=True)
class TrialOutcome:
    """The aggregate of one trial over its cases."""

    cases: tuple[CaseOutcome, ...]
    wall_s: float
    #: where the trial ran: ``pid N`` of a local process, or the Ray node's id
    ran_on: str = ""

    @property
    def requests(self) -> int:
        return sum(c.requests for c in self.cases)

    @property
    def met(self) -> int:
        return sum(c.met for c in self.cases)

    @property
    def gpu_hours(self) -> float:
        return sum(c.gpu_hours for c in self.cases)

    @property
    def attainment(self) -> float:
        """Share of all the cases' requests that met the SLO (1.0 with no request at all)."""
        n = self.requests
        return self.met / n if n else 1.0

    def as_json(self) -> dict[str, Any]:
        return {
            "gpu_hours": self.gpu_hours,
            "attainment": self.attainment,
            "requests": self.requests,
            "met": self.met,
            "wall_s": self.wall_s,
            "ran_on": self.ran_on,
            "cases": [
                {"label": c.label, "requests": c.requests, "met": c.met, "gpu_hours": c.gpu_hours}
                for c in self.cases
            ],
        }


def params_for(base: Mapping[str, Any], searched: Mapping[str, Any]) -> dict[str, Any]:
    """The policy's parameters of a trial: ``--policy-config``'s (guards included), then the trial's."""
    return {**dict(base), **dict(searched)}


def evaluate(policy: str, params: Mapping[str, Any], cases: Sequence[TuneCase]) -> TrialOutcome:
    """Backtest ``policy`` with ``params`` (merged over any in each case's settings) on every case.

    Raises ConfigError when the policy cannot be built with these parameters (a cross-field check
    of the policy's own), which the study records as a failed trial.
    """
    from llmscale.backtest.runner import run_policy

    wall0 = time.perf_counter()
    out: list[CaseOutcome] = []
    for case in cases:
        own = case.settings.policy_params.get(policy) or {}
        settings = replace(
            case.settings, policy_params={**case.settings.policy_params, policy: params_for(own, params)}
        )
        summary = run_policy(case.workload, policy, settings).summary
        n = int(summary["requests"])
        attainment = summary["slo_attainment"]
        # The summary rounds attainment to 6 digits: round back to a whole count of requests.
        met = round(float(attainment) * n) if attainment is not None else 0
        out.append(CaseOutcome(case.label, n, met, float(summary["gpu_hours"])))
    return TrialOutcome(tuple(out), time.perf_counter() - wall0, ran_on=f"pid {os.getpid()}")
