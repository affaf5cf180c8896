"""Requests longer than the model's context: the fleet's rejections, the check and the sizing.

vLLM answers HTTP 400 when prompt tokens + max_tokens exceed max_model_len
(prompt + max_tokens == max_model_len is served). The fleet applies that on
arrival; llmscale.sim.limits states the same rule for everything outside the
fleet, and these tests hold the two to each other at the boundary.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fake_perf import FakePerf

from llmscale.backtest.context_check import SIMILAR_SIZE_FACTOR, check_context, fleet_limit, within_context
from llmscale.backtest.sizing import replica_capacity_rps
from llmscale.errors import ConfigError
from llmscale.perf import get_perf_model
from llmscale.perf.catalogue import get_model
from llmscale.sim.config import SimConfig
from llmscale.sim.fleet import Fleet
from llmscale.sim.limits import context_limit, exceeds_context
from llmscale.types import Status
from llmscale.workloads import Workload

LLAMA3_CONTEXT = 8192  # Meta-Llama-3-8B config.json max_position_embeddings


def _boundary(limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Requests of limit - 1, limit and limit + 1 tokens in all (and a short one), 10 of them output."""
    need = np.array([limit - 1, limit, limit + 1, 100], dtype=np.int64)
    return need - 10, np.full(need.size, 10, dtype=np.int64)


def _fleet(perf, inp: np.ndarray, out: np.ndarray, **sim) -> Fleet:
    arrivals = np.arange(inp.size, dtype=np.float64) * 0.001
    return Fleet(perf, SimConfig(**sim), arrivals, inp, out, initial_replicas=1, gpus_per_replica=1)


@pytest.mark.parametrize(
    ("perf", "sim", "kv_bound"),
    [
        pytest.param(get_perf_model("llama-3-8b", "h100-80gb", 1), {}, False, id="max-model-len-binds"),
        pytest.param(FakePerf(blocks=300), {}, True, id="kv-pool-binds"),
        pytest.param(
            get_perf_model("llama-3-8b", "h100-80gb", 1), {"max_model_len": 4096}, False, id="configured"
        ),
    ],
)
def test_the_limit_is_exactly_what_the_fleet_rejects(perf, sim, kv_bound):
    probe = _fleet(perf, np.zeros(0, np.int64), np.zeros(0, np.int64), **sim)
    limit = context_limit(probe)
    assert limit.kv_bound is kv_bound
    inp, out = _boundary(limit.admitted_tokens)
    fleet = _fleet(perf, inp, out, **sim)
    fleet.run_until(0.01)  # every arrival processed; a rejection is decided on arrival
    rejected = np.frombuffer(bytes(fleet.status), dtype=np.uint8) == Status.REJECTED
    assert rejected.tolist() == [False, False, True, False]
    assert exceeds_context(inp, out, limit.admitted_tokens).tolist() == rejected.tolist()


def _workload(need: list[int]) -> Workload:
    n = len(need)
    inp = np.asarray(need, dtype=np.int64) - 50
    return Workload.from_arrays("t", np.arange(n, dtype=np.float64), inp, np.full(n, 50))


def test_check_counts_the_requests_beyond_the_context_and_names_a_longer_context_model():
    need = [100, 2000, LLAMA3_CONTEXT, 8193, 12_000, 20_000, 500, 700, 900, 1100]
    check = check_context(_workload(need), "llama-3-8b", "h100-80gb", 1, SimConfig())
    assert check.limit.admitted_tokens == get_model("llama-3-8b").max_context_tokens == LLAMA3_CONTEXT
    assert (check.over_context_requests, check.requests, check.longest_request_tokens) == (3, 10, 20_000)
    assert check.share == pytest.approx(0.3)
    first = check.alternatives[0]
    # Llama-3.1-8B is Llama-3-8B's shapes with a 128k context: the closest size, and it takes them all.
    assert (first.model, first.admitted_tokens, first.over_context_requests) == ("llama-3.1-8b", 131_072, 0)
    size = get_model("llama-3-8b").param_count
    for alt in check.alternatives:
        assert alt.over_context_requests < check.over_context_requests
        ratio = get_model(alt.model).param_count / size
        assert 1 / SIMILAR_SIZE_FACTOR <= ratio <= SIMILAR_SIZE_FACTOR
    doc = check.as_json()
    assert doc["over_context_requests"] == 3 and doc["over_context_share"] == 0.3
    assert doc["long_context_models"][0] == {
        "model": "llama-3.1-8b",
        "admitted_tokens": 131_072,
        "over_context_requests": 0,
    }


def test_check_on_a_fitting_workload_names_nobody():
    check = check_context(_workload([100, 8000, 8192]), "llama-3-8b", "h100-80gb", 1, SimConfig())
    assert check.over_context_requests == 0 and check.alternatives == ()
    assert within_context(_workload([100]), check).num_requests == 1


def test_a_request_longer_than_every_catalogue_model_leaves_only_partial_alternatives():
    check = check_context(_workload([100, 10_000, 200_000]), "llama-3-8b", "h100-80gb", 1, SimConfig())
    assert check.over_context_requests == 2
    assert check.alternatives and all(a.over_context_requests == 1 for a in check.alternatives)


def test_kv_bound_limit_is_the_pool_the_fleet_allocates():
    # Llama-3.1-70B on two H100s: 131,072 tokens of context, but after the weights (70.6B x 2 B
    # over 2 GPUs) the KV pool holds far less; vLLM would not start without --max-model-len.
    lim = fleet_limit("llama-3.1-70b", "h100-80gb", 2, SimConfig())
    assert lim.max_model_len_tokens == 131_072
    assert lim.kv_bound and lim.admitted_tokens == lim.kv_pool_tokens < 131_072


def test_within_context_keeps_the_admitted_requests_and_refuses_an_empty_backtest():
    w = _workload([100, 9000, 200, 8192, 10_000])
    check = check_context(w, "llama-3-8b", "h100-80gb", 1, SimConfig())
    kept = within_context(w, check)
    assert (kept.input_tokens + kept.output_tokens).tolist() == [100, 200, 8192]
    assert kept.arrival_s.tolist() == [0.0, 2.0, 3.0]
    every = _workload([9000, 10_000])
    with pytest.raises(
        ConfigError, match=r"8,192 tokens llama-3-8b admits.*llama-3\.1-8b \(131,072 tokens\)"
    ):
        within_context(every, check_context(every, "llama-3-8b", "h100-80gb", 1, SimConfig()))


def test_rejected_requests_never_lower_a_replicas_measured_capacity():
    # Half of the probe's lengths are beyond the context. Judged as SLO misses they capped
    # attainment at ~50% at every rate, and the probe answered its floor, 0.001 req/s. Rejected
    # on arrival they cost the replica nothing, so it sustains at least the rate it sustains
    # on the admitted half alone (about twice, as half of the arrivals are turned away).
    perf = get_perf_model("llama-3-8b", "h100-80gb", 1)
    rng = np.random.default_rng(3)
    inp = rng.integers(500, 3000, 200)
    out = rng.integers(600, 1200, 200)
    long_inp = np.full(200, 12_000)
    sim = SimConfig()
    fits = replica_capacity_rps(perf, sim, inp, out, 2.0, 0.1)
    mixed = replica_capacity_rps(
        perf, sim, np.concatenate([inp, long_inp]), np.concatenate([out, out]), 2.0, 0.1
    )
    assert fits > 0.1
    assert mixed >= fits
    assert math.isfinite(mixed)
