"""Infeasible requests: a prefill alone on an idle replica past the TTFT target, counted apart.

Llama-3-8B on one H100 (the simulator's perf model, no step noise): a 1,000-token prompt's first
token comes after ~0.03 s on an idle replica, a 7,000-token one's after ~0.24 s. With a 0.2 s
TTFT target the long ones miss at any fleet size; with 0.01 s more per 1,000 prompt tokens their
target is 0.27 s and they are feasible.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmscale.backtest.compare import build_document, run_backtest
from llmscale.backtest.feasibility import feasible_only, infeasible_mask
from llmscale.backtest.runner import BacktestSettings, build_fleet
from llmscale.backtest.sizing import replica_capacity_rps, replicas_for_rate
from llmscale.errors import ConfigError
from llmscale.sim.config import SimConfig
from llmscale.slo import slo_met, ttft_target_s
from llmscale.types import Status
from llmscale.workloads import Workload

SHORT, LONG = 1000, 7000


def _workload(n: int = 40, long_every: int = 2) -> Workload:
    arrivals = np.arange(n, dtype=np.float64) * 3.0  # one request every 3 s: a light load
    inp = np.array([LONG if i % long_every == 0 else SHORT for i in range(n)], dtype=np.int64)
    out = np.full(n, 20, dtype=np.int64)
    return Workload.from_arrays("mixed", arrivals, inp, out, {})


def _settings(**kw) -> BacktestSettings:
    base = BacktestSettings(
        min_replicas=1,
        max_replicas=4,
        initial_replicas=1,
        slo_ttft_s=0.2,
        sim=SimConfig(pending_s=20.0, loading_s=10.0, warmup_s=5.0, grace_s=10.0, timeout_s=30.0),
    )
    return replace(base, **kw)


@pytest.mark.parametrize("replicas", [1, 3])
def test_long_prefills_miss_at_any_fleet_size_and_are_counted_apart(replicas):
    w = _workload()
    s = _settings(policy_params={"static": {"replicas": replicas}}, initial_replicas=replicas)
    (r,), oracle, _ = run_backtest(w, ["static"], s, include_oracle=True)
    long_ones = int((w.input_tokens == LONG).sum())
    for row in (r.summary, oracle.summary):
        assert row["infeasible"] == long_ones == 20
        # The simulated run agrees: every long request missed, every short one met the SLO.
        assert row["slo_attainment"] == pytest.approx(0.5)
        assert row["slo_attainment_feasible"] == 1.0
    doc = build_document(w, s, [r], oracle, with_series=False)
    assert doc["workload"]["infeasible"] == {
        "requests": 20,
        "share": 0.5,
        "over_context": 0,
        "prefill_past_ttft_target": 20,
    }


def test_the_oracle_sizes_for_the_feasible_requests_only():
    # Half the requests can never meet the SLO: judged on all of them, no count reaches 99% and
    # the oracle bought the whole fleet; on the feasible ones one replica serves this light load.
    (_, oracle, _) = run_backtest(_workload(), [], _settings(), include_oracle=True)
    assert oracle.summary["replicas_max"] == 1


def test_a_length_aware_target_makes_them_feasible():
    w = _workload()
    s = _settings(slo_ttft_per_1k_tokens_s=0.01)
    assert not infeasible_mask(w, s).any()
    (r,), _, _ = run_backtest(
        w, ["static"], replace(s, policy_params={"static": {"replicas": 1}}), include_oracle=False
    )
    assert r.summary["infeasible"] == 0
    assert r.summary["slo_attainment"] == r.summary["slo_attainment_feasible"] == 1.0


def test_slo_met_takes_a_target_per_request():
    status = np.array([Status.COMPLETED] * 2, dtype=np.uint8)
    ttft = np.array([0.25, 0.25])
    tpot = np.array([0.01, 0.01])
    target = ttft_target_s(np.array([SHORT, LONG]), 0.2, 0.01)
    assert list(slo_met(status, ttft, tpot, target, 0.1)) == [False, True]


def test_the_probe_sizes_from_feasible_requests():
    # One request in five infeasible: fed them, no rate keeps 99% within the SLO, and the probe
    # falls back to what a nearly idle replica reaches (~80%) less a point, a far lower capacity
    # than the feasible requests' own; fed the feasible ones, a real capacity.
    w = _workload(n=50, long_every=5)
    s = _settings()
    perf = build_fleet(w, s, 0).perf
    every = replica_capacity_rps(perf, s.sim, w.input_tokens, w.output_tokens, 0.2, 0.1)
    feasible = feasible_only(w, s)
    assert feasible.num_requests == 40
    sized = replica_capacity_rps(perf, s.sim, feasible.input_tokens, feasible.output_tokens, 0.2, 0.1)
    assert sized > 1.0
    assert every < sized / 10.0


def test_the_probe_stays_bounded_when_no_rate_meets_the_target():
    # A 1 ms TPOT target no stream meets: every request misses at any rate. The probe used to
    # report its floor (0.001 req/s), from which a 20 req/s peak asks for 20,000 replicas (more
    # than a backtest may hold); against what an idle replica reaches (nothing), no rate is too
    # much, and the fleet is sized at its minimum.
    w = feasible_only(_workload(n=50, long_every=5), _settings())
    perf = build_fleet(w, _settings(), 0).perf
    cap = replica_capacity_rps(perf, _settings().sim, w.input_tokens, w.output_tokens, 0.2, 0.001)
    assert replicas_for_rate(20.0, cap) == 1


def test_no_feasible_request_is_a_clear_error():
    w = _workload(n=4, long_every=1)
    with pytest.raises(ConfigError, match="no request of mixed can meet the SLO"):
        feasible_only(w, _settings())
