"""The oracle and the causal reference of a fleet beyond one pool of one GPU type, wired once.

Two fleets have yardsticks of their own:

- **disaggregated** (``settings.disaggregated``): the two-pool oracle shaped to the load and its
  causal reference (:func:`~llmscale.backtest.disagg_reference.run_two_pool_yardsticks`), in
  GPU-hours;
- **mixed** (``settings.gpus``): each type's oracle and reference, the cheapest by cost
  (:func:`~llmscale.backtest.mixed_reference.run_mixed_oracle`), in cost.

``llmscale backtest --disaggregated`` / ``--gpus`` and the workload matrix's fleet cells
(``benchmarks/matrix_fleets.py``) both call :func:`disaggregated_yardsticks` and
:func:`mixed_yardsticks`, so the numbers a user reads are the ones the matrix judges.

The *judged* policy of a fleet (:data:`JUDGED_POLICY`) is what ``slo`` means on it, and its
measure (:data:`FLEET_MEASURE`) is the field compared with the reference: on the default prices
an A100 fleet of an 8B model costs 36% less than an H100 one for more GPU-hours
(docs/gpu-mix.md), so a mixed fleet is judged by cost. Importing this module is cheap (the
report reads the two tables); the runs import what they need when called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from llmscale.backtest.causal_reference import ReferenceSettings
    from llmscale.backtest.disagg import DisaggResult
    from llmscale.backtest.results import PolicyResult
    from llmscale.backtest.runner import BacktestSettings
    from llmscale.workloads.model import Workload

__all__ = [
    "FLEET_MEASURE",
    "JUDGED_POLICY",
    "Fleet",
    "disaggregated_yardsticks",
    "fleet_of",
    "judged_policy",
    "mixed_yardsticks",
    "price_of_foresight",
    "reference_ratio",
]

#: "single": one pool of one GPU type
Fleet = Literal["single", "disaggregated", "mixed"]
#: the policy each fleet is judged on against its reference: what ``slo`` means there
JUDGED_POLICY: dict[str, str] = {"single": "slo", "disaggregated": "slo-disagg", "mixed": "gpu-mix"}
#: the result field compared with the reference (and the oracle) on each fleet
FLEET_MEASURE: dict[str, str] = {"single": "gpu_hours", "disaggregated": "gpu_hours", "mixed": "cost"}


def fleet_of(settings: BacktestSettings) -> Fleet:
    """Which fleet ``settings`` describe (two pools win over a GPU list: they take one type)."""
    if settings.disaggregated is not None:
        return "disaggregated"
    return "mixed" if settings.gpus else "single"


def judged_policy(fleet: str, policies: list[str]) -> str | None:
    """The policy of ``policies`` judged against the reference: the fleet's own
    (:data:`JUDGED_POLICY`) when it ran, else ``slo`` when it ran, else none."""
    for name in (JUDGED_POLICY[fleet], "slo"):
        if name in policies:
            return name
    return None


def reference_ratio(row: Mapping[str, Any], reference: Mapping[str, Any], measure: str) -> float | None:
    """``row``'s ``measure`` over the reference's (the matrix's criterion allows 1.15x), or None
    when either is missing or the reference's is 0. E.g. 0.1224 GPU-hours against 0.1020: 1.2."""
    mine, theirs = row.get(measure), reference.get(measure)
    if mine is None or theirs is None or float(theirs) <= 0.0:
        return None
    return round(float(mine) / float(theirs), 4)


def price_of_foresight(oracle: Mapping[str, Any], reference: Mapping[str, Any], measure: str) -> float | None:
    """The reference's ``measure`` over the oracle's: what knowing the future is worth."""
    return reference_ratio(reference, oracle, measure)


def disaggregated_yardsticks(
    workload: Workload,
    settings: BacktestSettings,
    reference: ReferenceSettings | None,
) -> tuple[DisaggResult, DisaggResult | None]:
    """(oracle, causal reference) of the two pools of ``settings.disaggregated``.

    With ``reference``: :func:`~llmscale.backtest.disagg_reference.run_two_pool_yardsticks` (the
    oracle takes the reference's run when that meets its target for less). Without: the shaped
    oracle alone, from the cheapest constant pair, and no reference.
    """
    from llmscale.backtest.disagg import run_disaggregated_oracle
    from llmscale.backtest.disagg_reference import run_shaped_oracle, run_two_pool_yardsticks

    if reference is not None:
        oracle, ref = run_two_pool_yardsticks(workload, settings, reference)
        return oracle, ref
    return run_shaped_oracle(workload, settings, run_disaggregated_oracle(workload, settings)), None


def mixed_yardsticks(
    workload: Workload,
    settings: BacktestSettings,
    reference: ReferenceSettings | None,
    *,
    decisions_out: IO[str] | None = None,
    spare_workers: Callable[[], int] | None = None,
) -> PolicyResult:
    """The mixed fleet's oracle, the cheapest type's by cost, with its ``causal_reference``
    attached when ``reference`` is given
    (:func:`~llmscale.backtest.mixed_reference.run_mixed_oracle`); ``decisions_out`` gets the
    chosen type's oracle log."""
    from llmscale.backtest.mixed_reference import run_mixed_oracle

    return run_mixed_oracle(
        workload, settings, reference=reference, decisions_out=decisions_out, spare_workers=spare_workers
    )
