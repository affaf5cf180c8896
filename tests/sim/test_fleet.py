"""The simulated replica and fleet, on a tiny affine step-time model (tests/sim/fake_perf.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fake_perf import FakePerf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.sim.config import SimConfig
from llmscale.sim.fleet import Fleet
from llmscale.types import Phase, Status


def make_fleet(arrivals, inputs, outputs, *, replicas=1, perf=None, **cfg):
    return Fleet(
        perf or FakePerf(),
        SimConfig(**cfg),
        np.asarray(arrivals, dtype=np.float64),
        np.asarray(inputs, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
        initial_replicas=replicas,
        gpus_per_replica=1,
    )


def test_single_request_timing_is_exact():
    # Prefill of 100 tokens alone: 10 ms + 0.1 ms/token x 100 = 20 ms to the first token.
    # Then 10 decode steps of 10.1 ms + 1 us x context (100..109).
    f = make_fleet([0.0], [100], [11])
    f.run_until(10.0)
    decode = sum(0.0101 + 1e-6 * (100 + k) for k in range(10))
    assert f.status[0] == Status.COMPLETED
    assert f.ttft_s[0] == pytest.approx(0.020)
    assert f.e2e_s[0] == pytest.approx(0.020 + decode)
    assert f.tpot_s[0] == pytest.approx(decode / 10)


def test_arrival_waits_for_the_step_in_progress():
    # Request 0 decodes in steps of ~10.2 ms from t=0.020; request 1 arrives at 0.050, mid-step;
    # its prefill starts when that step ends (0.0506...), never before.
    f = make_fleet([0.0, 0.050], [100, 50], [50, 5])
    f.run_until(10.0)
    step_ends = [0.020]
    for k in range(10):
        step_ends.append(step_ends[-1] + 0.0101 + 1e-6 * (100 + k))
    in_progress_end = next(t for t in step_ends if t > 0.050)
    # Mixed step: 1 decode (context 100 + steps so far) plus a 50-token prefill.
    steps_done = step_ends.index(in_progress_end)
    mixed = 0.0101 + 1e-6 * (100 + steps_done) + 0.0001 * 50
    assert f.ttft_s[1] == pytest.approx(in_progress_end + mixed - 0.050)
    assert f.counts[Status.COMPLETED] == 2


def test_preemption_under_kv_pressure_still_completes_everything():
    # 40 blocks of 16 tokens = 640 tokens of KV for 8 requests that grow to 200 tokens each.
    f = make_fleet(np.zeros(8), [40] * 8, [160] * 8, perf=FakePerf(blocks=40))
    f.run_until(100.0)
    r = f.replicas[0]
    assert f.counts[Status.COMPLETED] == 8
    assert r.num_preemptions > 0
    assert r.blocks_used == 0
    assert r.gen_tokens_total >= 8 * 160


def test_max_num_seqs_bounds_the_batch():
    f = make_fleet(np.linspace(0, 0.1, 50), [10] * 50, [300] * 50, max_num_seqs=8)
    for t in np.linspace(0.05, 5.0, 40):
        f.run_until(float(t))
        f.sync_all(float(t))
        assert f.replicas[0].num_running <= 8
    f.run_until(200.0)
    assert f.counts[Status.COMPLETED] == 50


def test_request_longer_than_the_context_is_rejected():
    f = make_fleet([0.0, 1.0], [9000, 10], [10, 10])
    f.run_until(5.0)
    assert f.status[0] == Status.REJECTED
    assert f.status[1] == Status.COMPLETED


def test_gateway_queue_times_out_when_no_replica_is_ready():
    f = make_fleet([0.0, 1.0], [10, 10], [10, 10], replicas=0, timeout_s=5.0)
    f.run_until(100.0)
    f.finish(100.0)
    assert f.counts[Status.TIMED_OUT] == 2


def test_new_replicas_pay_the_cold_start_then_serve_the_gateway_queue():
    f = make_fleet([0.0], [10], [2], replicas=0, pending_s=5.0, loading_s=3.0, warmup_s=2.0)
    f.scale_to(1, 0.0)
    f.run_until(9.9)
    assert f.replicas[0].phase == Phase.WARMUP
    f.run_until(20.0)
    assert f.status[0] == Status.COMPLETED
    # prefill alone: 10 ms base + 0.1 ms x 10 tokens, right after the 10 s cold start
    assert f.ttft_s[0] == pytest.approx(10.0 + 0.010 + 0.0001 * 10, rel=1e-6)


def test_drain_waits_for_in_flight_work_within_the_grace_period():
    # Long generation (1000 tokens x ~10 ms = ~10 s) on the replica that drains; grace 30 s.
    f = make_fleet([0.0], [10], [1000], replicas=2, grace_s=30.0)
    f.run_until(1.0)
    f.scale_to(1, 1.0)
    f.run_until(60.0)
    assert f.status[0] == Status.COMPLETED
    assert len(f.replicas) == 1


def test_grace_expiry_kills_and_counts():
    f = make_fleet([0.0], [10], [5000], replicas=1, grace_s=2.0)
    f.run_until(1.0)
    f.scale_to(0, 1.0)
    f.run_until(60.0)
    assert f.status[0] == Status.KILLED
    assert f.counts[Status.KILLED] == 1
    assert not f.replicas


def test_gpu_seconds_count_every_replica_from_pending_to_gone():
    f = make_fleet([0.0], [10], [2], replicas=2)  # two GPUs from 0
    f.run_until(10.0)
    f.scale_to(3, 10.0)  # a third from 10 s
    f.run_until(20.0)
    f.scale_to(1, 20.0)  # the pending one is cancelled, one idle ready replica drains at once
    f.run_until(30.0)
    assert f.gpu_seconds(30.0) == pytest.approx(2 * 20 + 10 + 10)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 120),
    rate=st.floats(1.0, 200.0),
    blocks=st.integers(30, 3000),
    seed=st.integers(0, 2**16),
    scale_plan=st.lists(st.tuples(st.floats(0.0, 30.0), st.integers(0, 5)), max_size=6),
    grace_s=st.floats(0.0, 20.0),
)
def test_requests_are_conserved_and_no_kill_before_grace(n, rate, blocks, seed, scale_plan, grace_s):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    inputs = rng.integers(1, 400, n)
    outputs = rng.integers(1, 400, n)
    f = make_fleet(
        arrivals,
        inputs,
        outputs,
        replicas=2,
        perf=FakePerf(blocks=blocks),
        grace_s=grace_s,
        pending_s=1.0,
        loading_s=1.0,
        warmup_s=1.0,
        timeout_s=10.0,
    )
    for t, k in sorted(scale_plan):
        f.run_until(t)
        f.scale_to(k, t)
        in_flight = sum(r.outstanding for r in f.replicas) + len(f.gateway)
        resolved = sum(f.counts)
        assert resolved + in_flight == f._next  # arrived so far
    f.run_until(float(arrivals[-1]) + 5.0)
    in_flight = sum(r.outstanding for r in f.replicas) + len(f.gateway)
    assert sum(f.counts) + in_flight == n
    assert f.unresolved == in_flight
    # No request is killed by a scale-down unless its replica's grace period expired.
    assert sum(k for _, _, k in f.kill_log) == f.counts[Status.KILLED]
    for drain_s, killed_s, _ in f.kill_log:
        assert killed_s - drain_s >= grace_s - 1e-9
    for r in f.replicas:
        assert 0 <= r.blocks_used <= r.total_blocks


def test_same_seed_same_outcome_with_step_noise():
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(0.05, 300))
    inputs = rng.integers(1, 800, 300)
    outputs = rng.integers(1, 300, 300)

    def run():
        f = make_fleet(arrivals, inputs, outputs, replicas=2, step_noise=0.1, seed=7)
        f.run_until(1000.0)
        return f.ttft_s, f.e2e_s

    a, b = run(), run()
    assert a[0] == b[0] and a[1] == b[1]
    assert not any(math.isnan(x) for x in a[0])


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), blocks=st.integers(60, 2000))
def test_closed_form_jumps_match_stepping_token_by_token(seed, blocks):
    """The jump is an optimisation, not an approximation: stepping one token at a time agrees."""
    rng = np.random.default_rng(seed)
    n = 80
    arrivals = np.cumsum(rng.exponential(0.03, n))
    inputs = rng.integers(1, 500, n)
    outputs = rng.integers(1, 200, n)
    runs = []
    for cap in (None, 1):
        f = make_fleet(
            arrivals, inputs, outputs, replicas=2, perf=FakePerf(blocks=blocks), max_jump_steps=cap
        )
        f.run_until(500.0)
        runs.append(f)
    fast, slow = runs
    assert list(fast.status) == list(slow.status)
    np.testing.assert_allclose(fast.e2e_s, slow.e2e_s, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.ttft_s, slow.ttft_s, rtol=1e-9, atol=1e-9)
    assert [r.num_preemptions for r in fast.replicas] == [r.num_preemptions for r in slow.replicas]
