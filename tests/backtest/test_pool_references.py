"""The oracle and the causal reference of the fleets beyond one pool of one GPU type, end to end:
two pools (prefill/decode, :mod:`llmscale.backtest.disagg_reference`) and a mixed-GPU fleet
(:mod:`llmscale.backtest.mixed_reference`).

Each runs on a short step of load (a third of the rate, then all of it), so that the oracle's
schedule rises and a causal schedule must learn the rise late. Checked: the reference never acts
on the future (its schedule is the oracle's learnt ``detection_s`` late with a rise served a
cold start later, and changing the oracle's future leaves its past as it was), the oracle costs
no more than the reference, and no policy reaches the oracle's attainment, or min(99%, the
reference's), for less.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmscale.backtest.causal_reference import (
    REFERENCE,
    ReferenceSettings,
    delayed_schedule,
    with_levels,
)
from llmscale.backtest.compare import run_backtest
from llmscale.backtest.disagg import run_disaggregated, run_disaggregated_oracle
from llmscale.backtest.disagg_reference import (
    PairSchedule,
    run_disaggregated_reference,
    run_shaped_oracle,
)
from llmscale.backtest.mixed_reference import cheapest_by_cost, run_mixed_oracle, type_settings
from llmscale.backtest.oracle_schedule import Grid
from llmscale.backtest.results import PolicyResult
from llmscale.backtest.runner import BacktestSettings
from llmscale.sim.config import SimConfig
from llmscale.sim.disagg import DisaggConfig
from llmscale.workloads import Workload, poisson

pytestmark = pytest.mark.slow

#: a short lifecycle (35 s cold start) so that a 6-minute run has room for late rises
SIM = SimConfig(pending_s=20.0, loading_s=10.0, warmup_s=5.0, grace_s=10.0, timeout_s=30.0)
COLD_START_S = 35.0


def _step(rate_rps: float, prompt: tuple[int, int], output: tuple[int, int], seed: int) -> Workload:
    """A third of ``rate_rps`` for 3 minutes, then ``rate_rps`` for 3 minutes."""
    low = poisson(rate_rps / 3.0, 180.0, seed=seed)
    high = poisson(rate_rps, 180.0, seed=seed + 1)
    arrivals = np.concatenate([low.arrival_s, high.arrival_s + 180.0])
    rng = np.random.default_rng(seed)
    n = arrivals.size
    inp = rng.integers(prompt[0], prompt[1], n).astype(np.int64)
    out = rng.integers(output[0], output[1], n).astype(np.int64)
    return Workload.from_arrays("step", arrivals, inp, out, {})


def _never_under(rows: dict[str, dict], bound: dict, need: float, measure: str) -> list[str]:
    """The rows reaching ``need`` attainment for less ``measure`` than ``bound``."""
    return [name for name, r in rows.items() if r["slo_attainment"] >= need and r[measure] < bound[measure]]


# ------------------------------------------------------------------------------------ two pools

#: long prompts, short answers: the prefill pool carries the step
PD_WORKLOAD = _step(18.0, (1500, 2500), (10, 50), seed=5)
PD_SETTINGS = BacktestSettings(
    min_replicas=1,
    max_replicas=6,
    initial_replicas=2,
    sim=SIM,
    disaggregated=DisaggConfig(prefill_initial_replicas=1, decode_initial_replicas=1),
)


@pytest.fixture(scope="module")
def two_pools():
    pair = run_disaggregated_oracle(PD_WORKLOAD, PD_SETTINGS, max_per_pool=6)
    oracle = run_shaped_oracle(PD_WORKLOAD, PD_SETTINGS, pair)
    reference = run_disaggregated_reference(PD_WORKLOAD, PD_SETTINGS, oracle, ReferenceSettings())
    policies = {
        name: run_disaggregated(PD_WORKLOAD, name, PD_SETTINGS).summary
        for name in ("slo-disagg", "dynamo-disagg", "static")
    }
    return pair, oracle, reference, policies


def test_two_pool_oracle_follows_the_step_and_bounds_every_policy(two_pools):
    pair, oracle, reference, policies = two_pools
    o = oracle.summary
    plan = o["oracle_schedule"]
    # The step needs more prefill replicas in its second half than in its first: a shaped
    # schedule holds fewer before it, so it costs less than the constant pair.
    assert plan["prefill"][0] < plan["prefill"][-1] == o["oracle_pair"]["prefill"]
    assert o["gpu_hours"] < pair.summary["gpu_hours"]
    assert o["slo_attainment"] >= 0.99
    # A lower bound: no policy reaches its attainment for fewer GPU-hours; nor the reference.
    assert _never_under(policies, o, o["slo_attainment"], "gpu_hours") == []
    assert reference.summary["gpu_hours"] >= o["gpu_hours"]


def test_two_pool_reference_never_acts_on_the_future(two_pools):
    _, oracle, reference, _ = two_pools
    r = reference.summary
    plan = oracle.summary["oracle_schedule"]
    search = r["reference_search"]
    settings = ReferenceSettings()
    grid = Grid.of(PD_WORKLOAD, settings.step_s)
    assert r["reference_delay_s"] == settings.detection_s + COLD_START_S
    if search["headroom"] is None and search["levels"] is None:
        # The constant pair: held from the start, it needs no foresight of when.
        pair = oracle.summary["oracle_pair"]
        assert set(search["prefill"]) == {pair["prefill"]} and set(search["decode"]) == {pair["decode"]}
        return
    h = search["headroom"] or 0.0
    segment_steps = round(search["segment_s"] / settings.step_s)
    for pool in ("prefill", "decode"):
        learnt = [int(n) for n in plan[pool]]

        def delayed(schedule: list[int]) -> tuple[int, ...]:
            return delayed_schedule(
                schedule, plan["interval_s"], settings.detection_s, COLD_START_S, grid, h, 1, 6
            )

        late = delayed(learnt)
        levels = (search["levels"] or {}).get(pool)
        # The answer is the late schedule, with headroom levels on some minutes (never fewer).
        want = late if levels is None else with_levels(late, levels, segment_steps, 1, 6)
        assert tuple(search[pool]) == want
        assert all(a >= b for a, b in zip(search[pool], late, strict=True))
        # Change the oracle's future from each interval on: the late schedule up to the moment
        # that change could be learnt stays as it was.
        for j in range(1, len(learnt)):
            changed = learnt[:j] + [n + 3 for n in learnt[j:]]
            seen_s = j * plan["interval_s"] + settings.detection_s
            steps = int(seen_s // settings.step_s)
            assert delayed(changed)[:steps] == late[:steps], (pool, j)
        # A rise of the late schedule serves no sooner than detection + cold start after the
        # oracle's: the count at t is at most what the oracle held at t - 15 s - 35 s.
        for k in range(len(late)):
            t = grid.start_s(k)
            j = max(0, int((t - settings.detection_s - COLD_START_S) // plan["interval_s"]))
            known = max(learnt[: j + 1]) if t >= settings.detection_s + COLD_START_S else learnt[0]
            assert late[k] <= max(1, math.ceil(known * (1 + h) - 1e-9)), (pool, k)


def test_two_pool_reference_is_undominated(two_pools):
    _, _, reference, policies = two_pools
    r = reference.summary
    assert r["policy"] == REFERENCE
    assert _never_under(policies, r, min(0.99, r["slo_attainment"]), "gpu_hours") == []
    assert r["price_of_foresight"] >= 1.0


def test_pair_schedules_are_checked_at_the_edge():
    with pytest.raises(Exception, match="same number"):
        PairSchedule((1, 2), (1,))
    with pytest.raises(Exception, match=">= 1"):
        PairSchedule((0,), (1,))


# ------------------------------------------------------------------------------- mixed GPU types

MIX_WORKLOAD = _step(16.0, (500, 1500), (100, 400), seed=7)
MIX_SETTINGS = BacktestSettings(
    min_replicas=1,
    max_replicas=12,
    initial_replicas=2,
    sim=SIM,
    gpu="a100-80gb",
    gpus=("a100-80gb", "h100-80gb", "h200"),
)


@pytest.fixture(scope="module")
def mixed():
    oracle = run_mixed_oracle(MIX_WORKLOAD, MIX_SETTINGS, reference=ReferenceSettings())
    results, _, _ = run_backtest(MIX_WORKLOAD, ["gpu-mix", "slo"], MIX_SETTINGS, include_oracle=False)
    return oracle, {r.policy: r.summary for r in results}


def test_mixed_oracle_is_the_cheapest_type_and_a_lower_bound_in_cost(mixed):
    oracle, policies = mixed
    o = oracle.summary
    by_gpu = o["mixed_by_gpu"]
    assert set(by_gpu) == {"a100-80gb", "h100-80gb", "h200"} and o["mixed_measure"] == "cost"
    # The cheapest type that holds the target is chosen by cost, not by GPU-hours.
    held = {g: v["oracle"] for g, v in by_gpu.items() if v["oracle"]["slo_attainment"] >= 0.99}
    assert o["gpu"] in held and o["cost"] == min(v["cost"] for v in held.values())
    # No policy reaches its attainment for less money.
    assert _never_under(policies, o, o["slo_attainment"], "cost") == []
    ref = oracle.causal_reference
    assert ref is not None and ref.summary["cost"] >= o["cost"]


def test_mixed_reference_is_its_types_causal_reference_and_undominated(mixed):
    oracle, policies = mixed
    ref = oracle.causal_reference
    assert ref is not None
    r = ref.summary
    assert r["policy"] == REFERENCE and r["mixed_measure"] == "cost"
    # The same definition as one type's: its row is that type's reference, run on its own.
    from llmscale.backtest.causal_reference import run_causal_reference
    from llmscale.backtest.oracle import run_oracle

    one = type_settings(MIX_SETTINGS, r["gpu"])
    # the mixed oracle's row is its type's oracle's when the two chose the same type
    source = oracle if oracle.summary["gpu"] == r["gpu"] else run_oracle(MIX_WORKLOAD, one)
    alone = run_causal_reference(MIX_WORKLOAD, one, source, ReferenceSettings())
    assert alone.summary["reference_search"]["schedule"] == r["reference_search"]["schedule"]
    assert alone.summary["cost"] == r["cost"]
    # Its first change serves no sooner than the reference's delay after t = 0 unless it holds
    # the oracle's first count with headroom from the start.
    assert r["reference_delay_s"] == ReferenceSettings().detection_s + COLD_START_S
    assert _never_under(policies, r, min(0.99, r["slo_attainment"]), "cost") == []


def test_cheapest_by_cost_reads_the_target_then_the_money():
    def row(att: float, cost: float) -> PolicyResult:
        return PolicyResult({"slo_attainment": att, "cost": cost})

    rows = {"a100-80gb": row(0.992, 4.25), "h100-80gb": row(0.9998, 5.40), "h200": row(0.985, 6.64)}
    assert cheapest_by_cost(rows, 0.99) == "a100-80gb"
    # Every type short of the target: the best less half a point.
    low = {"a100-80gb": row(0.97, 4.0), "h100-80gb": row(0.985, 5.0)}
    assert cheapest_by_cost(low, 0.99) == "h100-80gb"
    assert cheapest_by_cost(low, 0.99) == cheapest_by_cost({**low, "h200": row(0.95, 1.0)}, 0.99)
