"""The oracle's search is cheaper but answers the same: same counts queried, same verdicts, same answers.

* ``_search`` (a generator replayed for look-ahead) asks the same counts in the
  same order as the gallop-then-bisect it replaced (``_reference_search`` below,
  kept here as written before), for monotone and non-monotone attainment alike;
* a trial stopped early (``_Verdict``) reaches the verdict the full trial
  reaches, and its attainment (a bound) brackets the full trial's;
* guessed trials run ahead on spare workers change nothing in the result.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmscale.backtest.oracle as oracle_module
from llmscale.backtest.compare import build_document, run_backtest, schedule
from llmscale.backtest.oracle import OracleSettings, _next_query, _search, _smallest_meeting, run_oracle
from llmscale.backtest.oracle_judge import Judge
from llmscale.backtest.runner import BacktestSettings, build_fleet
from llmscale.sim.config import SimConfig
from llmscale.workloads import flash_crowd


def _reference_search(attainment, start, lo, hi, target):
    """The search as it was before the generator: the reference for the order of queries."""
    start = min(max(start, lo), hi)
    if attainment(start) >= target:
        good, step, bad = start, 1, lo - 1
        while good - step >= lo:
            if attainment(good - step) >= target:
                good -= step
                step *= 2
            else:
                bad = good - step
                break
        while good - bad > 1:
            mid = (good + bad) // 2
            if attainment(mid) >= target:
                good = mid
            else:
                bad = mid
        return good
    bad, step, good = start, 1, hi + 1
    while bad + step <= hi:
        if attainment(bad + step) >= target:
            good = bad + step
            break
        bad += step
        step *= 2
    if good > hi:
        if attainment(hi) >= target:
            good = hi
        else:
            return hi
    while good - bad > 1:
        mid = (good + bad) // 2
        if attainment(mid) >= target:
            good = mid
        else:
            bad = mid
    return good


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda lo: st.tuples(
            st.just(lo),
            st.integers(lo, 40),
            st.integers(0, 45),
            st.lists(st.booleans(), min_size=50, max_size=50),
            st.booleans(),
        )
    )
)
def test_search_asks_what_the_reference_asks(args):
    lo, hi, start, noise, monotone = args
    threshold = (lo + hi) // 2

    def meets(n: int) -> bool:
        # monotone: a threshold; otherwise arbitrary (the search must still follow the same path)
        return n >= threshold if monotone else noise[n]

    ref_asked: list[int] = []
    ref = _reference_search(lambda n: ref_asked.append(n) or float(meets(n)), start, lo, hi, 1.0)
    new_asked: list[int] = []
    new = _smallest_meeting(lambda n: new_asked.append(n) or float(meets(n)), start, lo, hi, 1.0)
    assert (new, new_asked) == (ref, ref_asked)
    # replaying the answers gives each next query and, at the end, the answer
    answers = [meets(n) for n in ref_asked]
    for k, n in enumerate(ref_asked):
        assert _next_query(start, lo, hi, answers[:k]) == (n, None)
    assert _next_query(start, lo, hi, answers) == (None, ref)


def test_search_generator_yields_start_first():
    assert next(_search(7, 1, 10)) == 7
    assert next(_search(70, 1, 10)) == 10


def _settings() -> BacktestSettings:
    return BacktestSettings(
        min_replicas=1,
        max_replicas=8,
        initial_replicas=2,
        sim=SimConfig(pending_s=20.0, loading_s=10.0, warmup_s=5.0, grace_s=10.0, timeout_s=30.0),
    )


def _oracle(monkeypatch, check_s: float, spare: int | None = None, log: bool = True):
    monkeypatch.setattr(oracle_module, "_CHECK_S", check_s)
    w = flash_crowd(10.0, 300.0, spike_start_s=100.0, spike_duration_s=50.0, multiplier=4.0, seed=3)
    sink = io.StringIO() if log else None
    spare_workers = (lambda: spare) if spare is not None else None
    result = run_oracle(w, _settings(), OracleSettings(), decisions_out=sink, spare_workers=spare_workers)
    rows = [json.loads(line) for line in sink.getvalue().splitlines()] if sink is not None else []
    return result, rows


@pytest.mark.slow
def test_early_stops_give_the_full_trials_verdicts(monkeypatch):
    # With a decision log every trial runs to its end; without one, trials stop early.
    full, full_rows = _oracle(monkeypatch, check_s=2.0)
    assert full_rows
    early, _ = _oracle(monkeypatch, check_s=2.0, log=False)
    assert early.summary == full.summary | {"wall_s": early.summary["wall_s"]}
    assert early.series == full.series


@pytest.mark.slow
def test_early_stops_happen_and_bracket_the_exact_attainment():
    # Trials of the first interval of the workload above, stopped early and run to the end.
    w = flash_crowd(10.0, 300.0, spike_start_s=100.0, spike_duration_s=50.0, multiplier=4.0, seed=3)
    s = replace(_settings(), sim=replace(_settings().sim, grace_s=float("inf")))
    target = OracleSettings().target
    judge = Judge.build(w, s, target)
    i1 = int((w.arrival_s < 60.0).sum())
    stopped = 0
    for n in range(1, 9):
        outcomes = []
        for to_the_end in (False, True):
            fleet = build_fleet(w, s, 0)
            oracle_module._scale(fleet, n, 0.0, 35.0)
            outcomes.append(
                oracle_module._run_trial(fleet, 0.0, 0, i1, judge, target, cap_s=90.0, exact=to_the_end)
            )
        (early, kind), (exact, exact_kind) = outcomes
        assert exact_kind == 0
        assert (early >= target) == (exact >= target), n
        if kind < 0:
            assert exact <= early
        elif kind > 0:
            assert exact >= early
        else:
            assert early == exact
        stopped += kind != 0
    assert stopped > 0


@pytest.mark.slow
def test_trials_run_ahead_change_nothing(monkeypatch):
    for log in (True, False):  # trials run to their end, and stopped early
        alone, alone_rows = _oracle(monkeypatch, check_s=2.0, log=log)
        ahead, ahead_rows = _oracle(monkeypatch, check_s=2.0, spare=1, log=log)
        assert ahead_rows == alone_rows
        assert ahead.summary == alone.summary | {"wall_s": ahead.summary["wall_s"]}
        assert ahead.series == alone.series


def test_schedule_starts_the_longest_first():
    names = ["hpa-gpu-util", "static", "oracle", "knative-kpa", "my-new-policy", "ray-serve"]
    order = schedule(names)
    assert order[0] == "oracle"
    assert order.index("knative-kpa") < order.index("static") < order.index("hpa-gpu-util")
    assert order.index("ray-serve") < order.index("my-new-policy") < order.index("hpa-gpu-util")
    assert sorted(order) == sorted(names)


@pytest.mark.slow
def test_parallel_backtest_with_the_oracle_alone_at_the_end_matches_sequential():
    # jobs=2: the short static run ends first, then the oracle runs its guesses on the idle worker
    w = flash_crowd(10.0, 300.0, spike_start_s=100.0, spike_duration_s=50.0, multiplier=4.0, seed=5)
    s = replace(_settings(), policy_params={"static": {"replicas": 3}})

    def doc(jobs: int) -> tuple[str, list[str]]:
        results, oracle, lines = run_backtest(w, ["static"], s, jobs=jobs, want_decisions=True)
        d = build_document(w, s, results, oracle, with_series=True)
        for row in [*d["results"], d["oracle"]]:
            row.pop("wall_s")
        return json.dumps(d, sort_keys=True), lines

    assert doc(2) == doc(1)
