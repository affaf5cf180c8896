"""Fleet.abort: a request whose client went away leaves its replica at once, its KV blocks freed.

The emulator calls it when an HTTP client disconnects mid-stream; these tests pin the
simulator's side on the tiny affine model of fake_perf.py (decode step 10 ms + 0.1 ms per
sequence + 1 us per context token, prefill 0.1 ms per token).
"""

from __future__ import annotations

import numpy as np
import pytest
from fake_perf import FakePerf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.sim.config import SimConfig
from llmscale.sim.fleet import Fleet
from llmscale.sim.replica import MIXED, blocks_for
from llmscale.sim.request import DECODING, PREFILLING, WAITING, Req
from llmscale.types import Status


def make_fleet(arrivals, inputs, outputs, *, replicas=1, blocks=10_000, **cfg) -> Fleet:
    return Fleet(
        FakePerf(blocks=blocks),
        SimConfig(**cfg),
        np.asarray(arrivals, dtype=np.float64),
        np.asarray(inputs, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
        initial_replicas=replicas,
        gpus_per_replica=1,
    )


def find(f: Fleet, idx: int) -> Req | None:
    """The unresolved request ``idx``, wherever it is (a replica's lists or the gateway)."""
    for r in f.replicas:
        for req in r.running.items() + r.waiting.items():
            if req.idx == idx:
                return req
    return next((req for req in f.gateway if req.idx == idx), None)


def kv_of(req: Req) -> int:
    """Tokens in the KV cache of a decoding request, read off its replica's step counter."""
    return req.kv_join + req.replica.counter - req.counter_join


def test_aborting_the_only_decoding_request_frees_its_slot_and_blocks_at_once():
    # 100-token prompt: first token at 20 ms; 1,000 tokens to go, ~10 s of decoding. Abort at 1 s.
    f = make_fleet([0.0], [100], [1000])
    f.run_until(1.0)
    r = f.replicas[0]
    req = find(f, 0)
    assert req is not None and req.state == DECODING and r.blocks_used > 0
    assert f.abort(req, 1.0)
    assert (r.num_running, r.outstanding, r.blocks_used, r.n_dec, r.sum_kv) == (0, 0, 0, 0, 0)
    assert not r.busy  # no step left in flight
    assert f.status[0] == Status.ABORTED and f.counts[Status.ABORTED] == 1 and f.unresolved == 0
    # ~(1 - 0.020) / 0.0102 = 96 tokens were decoded before the abort, plus the first one.
    assert 90 <= req.generated <= 100
    assert not f.abort(req, 1.0)  # resolved already: nothing to do


def test_aborting_one_of_two_decoding_requests_keeps_the_others_blocks():
    f = make_fleet([0.0, 0.0], [100, 300], [1000, 1000])
    f.run_until(1.0)
    r = f.replicas[0]
    a, b = find(f, 0), find(f, 1)
    assert a is not None and b is not None and a.state == b.state == DECODING
    assert f.abort(a, 1.0)
    assert r.num_running == 1 and r.n_dec == 1
    assert r.blocks_used == blocks_for(kv_of(b))
    f.run_until(100.0)
    assert f.status[1] == Status.COMPLETED and r.blocks_used == 0 and r.outstanding == 0


def test_aborting_a_prompt_in_prefill_frees_the_chunk_in_flight():
    # 6,000-token prompt: one 6,000-token chunk, 10 ms + 0.6 s. Abort 0.3 s in.
    f = make_fleet([0.0], [6000], [10])
    f.run_until(0.3)
    r = f.replicas[0]
    req = find(f, 0)
    assert req is not None and req.state == PREFILLING and r.blocks_used == blocks_for(6000)
    assert f.abort(req, 0.3)
    assert (r.num_running, r.outstanding, r.blocks_used) == (0, 0, 0)
    f.run_until(5.0)  # the iteration that was under way ends without it
    assert r.blocks_used == 0 and f.counts[Status.COMPLETED] == 0


def test_aborting_a_waiting_request_leaves_the_batch_alone():
    f = make_fleet([0.0, 0.0], [100, 100], [500, 50], max_num_seqs=1)
    f.run_until(0.5)
    r = f.replicas[0]
    queued = find(f, 1)
    assert queued is not None and queued.state == WAITING and r.num_waiting == 1
    r.sync(0.5)  # a jump's blocks are counted lazily
    used = r.blocks_used
    assert f.abort(queued, 0.5)
    assert r.num_waiting == 0 and r.num_running == 1 and r.blocks_used == used
    f.run_until(100.0)
    assert f.status[0] == Status.COMPLETED and f.status[1] == Status.ABORTED


def test_aborting_a_request_held_at_the_gateway():
    f = make_fleet([0.0], [100], [10], replicas=0)
    f.run_until(0.1)
    req = find(f, 0)
    assert req is not None and len(f.gateway) == 1
    assert f.abort(req, 0.1)
    assert len(f.gateway) == 0 and f.status[0] == Status.ABORTED


def test_a_draining_replica_leaves_once_its_last_request_is_aborted():
    f = make_fleet([0.0], [100], [1000], grace_s=600.0)
    f.run_until(1.0)
    f.scale_to(0, 1.0)
    (r,) = f.replicas
    assert r.draining
    req = find(f, 0)
    assert req is not None and f.abort(req, 1.0)
    assert f.replicas == [] and r.gone_s == 1.0


def test_iteration_tokens_count_as_vllm_counts_them():
    """A 100-token prompt alone, 5 output tokens: the first step carries the prompt and the first
    token (101, as vLLM's IterationStats adds prompt_len on a request's first output), then four
    decode steps of one token."""
    f = make_fleet([0.0], [100], [5], step_token_stats=True)
    f.run_until(10.0)
    r = f.replicas[0]
    mixed = r.hist_mixed_step_tokens
    assert (mixed.count, mixed.sum) == (1, 101)
    # The backtest does not keep it (only the emulator exports it).
    quiet = make_fleet([0.0], [100], [5])
    quiet.run_until(10.0)
    assert quiet.replicas[0].hist_mixed_step_tokens.count == 0
    assert list(r.decode_steps_by_batch)[:3] == [0, 4, 0]  # four steps of a batch of one


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    blocks=st.integers(40, 2000),
    aborts=st.lists(st.tuples(st.floats(0.0, 3.0), st.integers(0, 59)), max_size=12),
    chunked=st.booleans(),
)
def test_aborts_conserve_requests_and_blocks_and_jumps_still_match_stepping(seed, blocks, aborts, chunked):
    """Random load on two replicas with little KV (so preemptions happen) and clients leaving at
    random moments: every block comes back, every request is resolved exactly once, and the
    closed-form jumps give the same outcome as stepping token by token with the same aborts."""
    rng = np.random.default_rng(seed)
    n = 60
    arrivals = np.cumsum(rng.exponential(0.03, n))
    inputs = rng.integers(1, 500, n)
    outputs = rng.integers(1, 300, n)
    runs = []
    for cap in (None, 1):
        f = make_fleet(
            arrivals, inputs, outputs, replicas=2, blocks=blocks, max_jump_steps=cap, chunked_prefill=chunked
        )
        aborted = []
        for t, idx in sorted(aborts):
            f.run_until(t)
            req = find(f, idx)
            if req is not None and f.abort(req, t):
                aborted.append(idx)
            for r in f.replicas:
                assert 0 <= r.blocks_used <= r.total_blocks
                assert r.outstanding == r.num_running + r.num_waiting
        f.run_until(600.0)
        for r in f.replicas:
            assert (r.blocks_used, r.n_dec, r.sum_kv, r.outstanding) == (0, 0, 0, 0)
        assert f.unresolved == 0 and sum(f.counts) == n
        assert sorted(aborted) == [i for i in range(n) if f.status[i] == Status.ABORTED]
        runs.append(f)
    fast, slow = runs
    assert list(fast.status) == list(slow.status)
    np.testing.assert_allclose(fast.e2e_s, slow.e2e_s, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.ttft_s, slow.ttft_s, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "whole-prompts"])
@pytest.mark.parametrize("cap", [None, 1], ids=["jumps", "stepping"])
def test_abort_mid_mixed_iteration_returns_the_blocks_of_its_decode_token(cap, chunked):
    """A decoding request aborted while a newcomer's prefill iteration is under way, at every
    step phase mod 16. With chunked prefill that iteration carries the decode step too and took
    the block for its token, which must come back as well; without, the decodes sit it out and
    hold no such block. Either way the replica must end with no block in use."""
    phases = set()
    for k in range(16):
        # Request 0 decodes; request 1 (a 2,000-token prompt, ~0.2 s of prefill) arrives after
        # 20 ms + k decode steps, so the mixed step starts at a different kv mod 16 each time.
        t1 = 0.020 + 0.0102 * k + 0.001
        f = make_fleet([0.0, t1], [16, 2000], [400, 5], max_jump_steps=cap, chunked_prefill=chunked)
        f.run_until(t1 + 0.05)
        a = find(f, 0)
        assert a is not None and a.state == DECODING and f.replicas[0].kind == MIXED
        kv_mod = kv_of(a) % 16
        assert f.abort(a, t1 + 0.05)
        f.run_until(60.0)
        r = f.replicas[0]
        assert f.status[1] == Status.COMPLETED and r.blocks_used == 0, (k, kv_mod)
        phases.add(kv_mod)
    assert 0 in phases  # the case where the mixed step had taken a new block for the decode token
