""" "Did this request meet its SLO" is decided once (llmscale/slo.py), and every judge uses it.

Three things are pinned: the rule itself (a table of edge cases); its scalar and array forms
agree on random arrays with NaN, infinities and ties; the oracle's trial verdict is the final
score on a length-aware SLO, where one target for all would judge differently; and no other
module compares a TTFT or TPOT with its target (a second copy of the rule fails the scan).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmscale
from llmscale.backtest.oracle_judge import Judge
from llmscale.backtest.oracle_schedule import Grid, ScheduleRun
from llmscale.backtest.runner import BacktestSettings
from llmscale.sim.config import SimConfig
from llmscale.slo import request_met, slo_met, ttft_target_s
from llmscale.types import Status
from llmscale.workloads import Workload

NAN, INF = math.nan, math.inf
DONE = Status.COMPLETED


@pytest.mark.parametrize(
    ("status", "ttft_s", "tpot_s", "met"),
    [
        pytest.param(DONE, 1.0, 0.05, True, id="within-both"),
        pytest.param(DONE, 2.0, 0.1, True, id="exactly-at-both-targets"),
        pytest.param(DONE, 2.000001, 0.05, False, id="ttft-just-over"),
        pytest.param(DONE, 1.0, 0.100001, False, id="tpot-just-over"),
        pytest.param(DONE, NAN, 0.05, False, id="no-first-token-fails"),
        pytest.param(DONE, 1.0, NAN, True, id="one-token-answer-has-no-tpot"),
        pytest.param(DONE, INF, 0.05, False, id="ttft-inf"),
        pytest.param(DONE, 1.0, INF, False, id="tpot-inf"),
        pytest.param(DONE, -INF, NAN, True, id="ttft-minus-inf-is-within"),
        pytest.param(Status.TIMED_OUT, 1.0, 0.05, False, id="timed-out"),
        pytest.param(Status.REJECTED, NAN, NAN, False, id="rejected"),
        pytest.param(Status.KILLED, 1.0, 0.05, False, id="killed-by-scale-down"),
        pytest.param(Status.IN_FLIGHT, 1.0, NAN, False, id="still-in-flight"),
    ],
)
def test_the_rule(status, ttft_s, tpot_s, met):
    assert request_met(status, ttft_s, tpot_s, 2.0, 0.1) is met
    arrays = slo_met(np.array([status], np.uint8), np.array([ttft_s]), np.array([tpot_s]), 2.0, 0.1)
    assert arrays.tolist() == [met]


#: values that sit on the rule's edges: NaN, infinities, signed zero, and a few that tie with
#: the targets drawn from the same list
EDGES = [NAN, INF, -INF, 0.0, -0.0, 0.05, 0.1, 2.0, 1e-300, 1e300]
seconds = st.one_of(st.sampled_from(EDGES), st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, len(Status.NAMES) - 1), seconds, seconds, seconds),
        max_size=40,
    ),
    tpot_target_s=seconds,
    one_ttft_target=st.booleans(),
)
def test_the_array_form_is_the_scalar_rule_element_by_element(rows, tpot_target_s, one_ttft_target):
    status = np.array([r[0] for r in rows], dtype=np.uint8)
    ttft = np.array([r[1] for r in rows], dtype=np.float64)
    tpot = np.array([r[2] for r in rows], dtype=np.float64)
    per_request = np.array([r[3] for r in rows], dtype=np.float64)
    target = (per_request[0] if rows else 2.0) if one_ttft_target else per_request
    met = slo_met(status, ttft, tpot, target, tpot_target_s)
    assert met.dtype == np.bool_ and met.shape == status.shape
    for i, (code, t, p, own) in enumerate(rows):
        t_target = float(target) if one_ttft_target else own
        assert bool(met[i]) == request_met(code, t, p, t_target, tpot_target_s), rows[i]


# -- the oracle's verdict is the final score -------------------------------------------------------

SHORT, LONG = 1000, 7000


def test_the_oracles_trial_verdict_is_the_final_score_on_a_length_aware_slo():
    """The oracle reads its verdict mid-run (Judge.outcomes) and is scored at the end (summarize).

    Llama-3-8B on one H100: a 7,000-token prompt's first token comes ~0.24 s after it reaches an
    idle replica (tests/backtest/test_feasibility.py), past a 0.2 s target but within 0.2 s +
    0.01 s per 1,000 tokens = 0.27 s. Judged with one target for every request (the 0.2 s base,
    as the compiled Fleet.tally took it), those requests would miss; the oracle's verdict and the
    final score both give each its own target, and agree request by request.
    """
    n = 60
    arrivals = np.arange(n, dtype=np.float64) * 0.5
    inp = np.array([LONG if i % 2 == 0 else SHORT for i in range(n)], dtype=np.int64)
    w = Workload.from_arrays("mixed", arrivals, inp, np.full(n, 20, dtype=np.int64), {})
    s = replace(
        BacktestSettings(min_replicas=1, max_replicas=4, initial_replicas=1, slo_ttft_s=0.2),
        slo_ttft_per_1k_tokens_s=0.01,
        sim=SimConfig(pending_s=20.0, loading_s=10.0, warmup_s=5.0, grace_s=10.0, timeout_s=30.0),
    )
    judge = Judge.build(w, s, 0.99)
    grid = Grid.of(w, 5.0)
    run = ScheduleRun(w, s, grid, cold_start_s=0.0)
    first_verdict: dict[int, bool] = {}
    for k in range(grid.num_intervals + 1):
        run.step(k, 1)
        resolved, met = judge.outcomes(run.fleet)
        for i in np.flatnonzero(resolved):
            first_verdict.setdefault(int(i), bool(met[i]))
    scored = run.result(judge, [1] * (grid.num_intervals + 1))
    assert len(first_verdict) == n
    # Each verdict read mid-run stands at the end, and the counts are the final score's.
    assert all(bool(scored.met[i]) == v for i, v in first_verdict.items())
    summary = scored.result.summary
    feasible = judge.num_feasible
    assert summary["slo_attainment_feasible"] == round((feasible - scored.misses) / feasible, 6)
    assert summary["slo_attainment"] == round(float(scored.met.sum()) / n, 6)
    # The length-aware target decides requests here: one target for all would count fewer met.
    fleet = run.fleet
    status = np.frombuffer(bytes(fleet.status), dtype=np.uint8)
    ttft, tpot = np.asarray(fleet.ttft_s), np.asarray(fleet.tpot_s)
    one_target = slo_met(status, ttft, tpot, s.slo_ttft_s, s.slo_tpot_s)
    per_request = slo_met(status, ttft, tpot, ttft_target_s(inp, 0.2, 0.01), s.slo_tpot_s)
    assert np.array_equal(per_request, scored.met)
    assert one_target.sum() < per_request.sum()


# -- no second copy ----------------------------------------------------------------------------------

SRC = Path(llmscale.__file__).resolve().parent
BENCHMARKS = SRC.parents[1] / "benchmarks"
RULE = SRC / "slo.py"
#: Compare a fleet-wide percentile with the SLO to choose a scaling action: the policy's goal,
#: not the judgement of a request (``p99 TTFT > slo_ttft_s`` -> scale up), so not scanned.
CONTROL = ("policies", "signals", "controller")

_LATENCY = re.compile(r"ttft|tpot")
_GOAL = re.compile(r"slo|target")


def _identifiers(node: ast.AST) -> str:
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    names += [n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)]
    return " ".join(names).lower()


def rule_copies(source: str) -> list[int]:
    """Lines comparing a TTFT or TPOT with an SLO target: a comparison whose operands name a
    latency (``ttft``, ``tpot``) and a goal (``slo``, ``target``), none of them a literal
    (``slo_ttft_s <= 0`` validates a setting; it judges nothing)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Constant) for o in operands):
            continue
        names = [_identifiers(o) for o in operands]
        if any(_LATENCY.search(n) for n in names) and any(_GOAL.search(n) for n in names):
            lines.append(node.lineno)
    return lines


#: copies of the rule that llmscale/slo.py replaced, as they were written (results.slo_met,
#: Fleet.tally, the oracle judge's pace test, the tail model's feasibility)
OLD_COPIES = [
    "ttft_ok = np.nan_to_num(ttft_s, nan=math.inf) <= slo_ttft_s",
    "ok = code == Status.COMPLETED and ttft[i] <= slo_ttft_s and not tpot[i] > slo_tpot_s",
    "late = emitted > 1 and (now_s - first) / (emitted - 1) > self.slo_tpot_s",
    "feasible = own_idle <= slo_ttft_s",
]


@pytest.mark.parametrize("line", OLD_COPIES)
def test_the_scan_finds_the_copies_it_replaced(line):
    assert rule_copies(line) and set(rule_copies(line)) == {1}


def test_no_module_but_llmscale_slo_compares_a_latency_with_its_target():
    files = [p for p in sorted(SRC.rglob("*.py")) if p != RULE]
    files = [p for p in files if p.relative_to(SRC).parts[0] not in CONTROL]
    files += sorted(BENCHMARKS.rglob("*.py"))
    assert len(files) > 100  # the scan saw the package
    found = {
        str(p.relative_to(SRC.parents[1])): lines
        for p in files
        if (lines := rule_copies(p.read_text(encoding="utf-8")))
    }
    assert found == {}, f"judge requests with llmscale.slo (ttft_within, tpot_within, slo_met): {found}"
