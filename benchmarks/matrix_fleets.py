"""The matrix's cells on other fleets: prefill/decode pools, and a fleet that mixes GPU types.

Each is a cell of the workload matrix (``policies.py``'s ``matrix_cell``: its workload, SLO and
bounds) served by another fleet, with that fleet's oracle and causal reference:

- ``h100-8b-pd`` runs code / ramp (prompts of 2,000 tokens on average, answers of 30: the prefill
  pool carries most of the work) on Llama-3.1-8B with separate prefill and decode pools of H100s
  over InfiniBand (:mod:`llmscale.backtest.disagg`). Its default policy is ``slo-disagg`` (what
  ``slo`` means on two pools: one instance per pool); the peers are Dynamo's disaggregated planner
  (``dynamo-disagg``) and llm-d's ``wva-saturation`` pool-wise. Oracle: the two-pool oracle shaped
  to the load; reference: its causal reference (:mod:`llmscale.backtest.disagg_reference`).
  Measured in GPU-hours.
- ``a100-8b-mix`` runs chat / ramp on the A100 8B cell with the fleet allowed A100s, H100s and H200s
  at the default prices. Its default policy is ``gpu-mix`` (the cheapest mix each tick); ``slo``
  and every peer scale the cell's GPU, the A100, the type with the most req/s per dollar (the
  initial fleet is A100s for every policy). Oracle and reference: each type's, the cheapest by cost
  (:mod:`llmscale.backtest.mixed_reference`). Measured in cost, the mix's objective.

Both are judged by the matrix's criterion with the cell's measure (``policies.judge``). The
oracle and the reference come from :mod:`llmscale.backtest.fleet_yardsticks`, the same calls
``llmscale backtest --disaggregated`` and ``--gpus`` make, as do the judged policy and measure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class FleetCell:
    #: the matrix deployment and cell the workload and settings come from
    deploy: str
    cell: str
    #: "disaggregated" or "mixed"
    fleet: str
    #: the policy judged (what ``slo`` means on this fleet)
    default: str
    #: the result field the criterion compares: gpu_hours or cost
    measure: str


def _cell(deploy: str, cell: str, fleet: str) -> FleetCell:
    from llmscale.backtest.fleet_yardsticks import FLEET_MEASURE, JUDGED_POLICY

    return FleetCell(deploy, cell, fleet, JUDGED_POLICY[fleet], FLEET_MEASURE[fleet])


#: name (as --deploy takes it) -> the cell
FLEET_CELLS = {
    "h100-8b-pd": _cell("h100-8b", "code/ramp", "disaggregated"),
    "a100-8b-mix": _cell("a100-8b", "chat/ramp", "mixed"),
}
#: the roster of the two-pool cell (the one-pool peers have no two-pool form but pool-wise)
DISAGG_ROSTER = ("slo-disagg", "dynamo-disagg", "wva-saturation")
#: the GPU types of the mixed cell, the cell's GPU first
MIXED_GPUS = ("a100-80gb", "h100-80gb", "h200")


def fleet_cell_setup(name: str, duration_s: float) -> tuple[Any, Any, float, int]:
    """(workload, settings, probe capacity, peak replicas) of the fleet cell ``name``."""
    from llmscale.sim.disagg import DisaggConfig
    from llmscale.workloads.matrix import CELLS
    from policies import matrix_cell

    spec = FLEET_CELLS[name]
    cell = next(c for c in CELLS if c.name == spec.cell)
    w, settings, cap, peak = matrix_cell(spec.deploy, cell, duration_s=duration_s)
    if spec.fleet == "disaggregated":
        # Each pool starts as `backtest --disaggregated` starts it: the cheapest constant pair
        # serving the first five minutes (as the aggregated fleet starts sized for them).
        from llmscale.backtest.disagg import initial_pools

        split = replace(settings, disaggregated=DisaggConfig())
        p, d = initial_pools(w, split)
        pools = DisaggConfig(prefill_initial_replicas=p, decode_initial_replicas=d)
        return w, replace(settings, disaggregated=pools), cap, peak
    return w, replace(settings, gpus=MIXED_GPUS), cap, peak


def run_fleet_cell(name: str, w: Any, settings: Any, policies: list[str], jobs: int) -> list[dict[str, Any]]:
    """Every row of the fleet cell ``name``: its roster's, the oracle's and the reference's."""
    from llmscale.backtest.causal_reference import ReferenceSettings
    from llmscale.backtest.fleet_yardsticks import disaggregated_yardsticks, mixed_yardsticks

    spec = FLEET_CELLS[name]
    if spec.fleet == "disaggregated":
        from llmscale.backtest.disagg import run_disaggregated

        rows = [run_disaggregated(w, p, settings).summary for p in DISAGG_ROSTER]
        oracle, ref = disaggregated_yardsticks(w, settings, ReferenceSettings())
        assert ref is not None
        return [*rows, oracle.summary, ref.summary]
    from llmscale.backtest.compare import run_backtest

    roster = [spec.default, *(p for p in policies if p != spec.default)]
    results, _, _ = run_backtest(w, roster, settings, include_oracle=False, jobs=jobs)
    mixed = mixed_yardsticks(w, settings, ReferenceSettings())
    assert mixed.causal_reference is not None
    return [*(r.summary for r in results), mixed.summary, mixed.causal_reference.summary]
