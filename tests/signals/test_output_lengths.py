"""``output_len_cv`` from ``vllm:request_generation_tokens`` bucket increases (signals/lengths.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from signals_fixtures import hist, obs, sample

from llmscale.metrics.names import VLLM, vllm_1_2_5_buckets
from llmscale.signals import compute_signals
from llmscale.signals.lengths import bucket_cv

BOUNDS_8K = (*(float(b) for b in vllm_1_2_5_buckets(8192)), math.inf)


def test_two_buckets_worked_number():
    # The module docstring's number: 100 requests in (100, 200] and 100 in (500, 1000].
    bounds = (100.0, 200.0, 500.0, 1000.0, math.inf)
    assert bucket_cv(bounds, (0.0, 100.0, 100.0, 200.0, 200.0)) == pytest.approx(0.706, abs=1e-3)


@pytest.mark.parametrize(
    ("cv", "tolerance"),
    [
        pytest.param(0.5, 0.15, id="narrow"),
        pytest.param(1.0, 0.15, id="exponential-like"),
        pytest.param(1.5, 0.2, id="wide"),
    ],
)
def test_lognormal_lengths_on_vllm_buckets(cv, tolerance):
    # vLLM's 1-2-5 buckets are coarse (a factor 2-2.5 each), yet the CV read back from them stays
    # within ~15-20% of the sample's own: enough for E[o^2] / E[o] = E[o] (1 + cv^2).
    rng = np.random.default_rng(0)
    sigma = math.sqrt(math.log1p(cv * cv))
    lengths = np.maximum(1.0, np.round(rng.lognormal(math.log(300.0) - sigma * sigma / 2, sigma, 20_000)))
    lengths = np.minimum(lengths, 8000.0)
    counts = np.searchsorted(np.array(BOUNDS_8K), lengths, side="left")
    cumulative = np.cumsum(np.bincount(counts, minlength=len(BOUNDS_8K))).astype(float)
    read = bucket_cv(BOUNDS_8K, tuple(cumulative))
    own = float(lengths.std() / lengths.mean())
    assert read == pytest.approx(own, rel=tolerance)


def test_the_signal_is_the_window_increase_over_replicas():
    # Two replicas; over the window each finished 10 requests of ~150 tokens and 10 of ~750: the
    # CV of the increases, not of the totals since start-up (which held only short requests).
    bounds = (100.0, 200.0, 500.0, 1000.0, math.inf)

    def rep(name, k):
        before = (0.0, 50.0, 50.0, 50.0, 50.0)
        h = before if k == 0 else (0.0, 60.0, 60.0, 70.0, 70.0)
        return sample(name, {}, {VLLM.output_tokens: hist(h, bounds)})

    window = [obs(0.0, rep("a", 0), rep("b", 0)), obs(15.0, rep("a", 1), rep("b", 1))]
    value = compute_signals(window).get("output_len_cv")
    assert value == pytest.approx(0.706, abs=1e-3)


def test_no_histogram_is_no_value():
    window = [obs(0.0, sample("a", {}, {})), obs(15.0, sample("a", {}, {}))]
    s = compute_signals(window)
    assert s.get("output_len_cv") is None
    assert s.values["output_len_cv"].note


def test_prompt_lengths_read_the_same_way():
    # vllm:request_prompt_tokens: the same rule over its own buckets, into prompt_len_cv.
    bounds = (100.0, 200.0, 500.0, 1000.0, math.inf)

    def rep(k):
        h = (0.0, 0.0, 0.0, 0.0, 0.0) if k == 0 else (0.0, 100.0, 100.0, 200.0, 200.0)
        return sample("a", {}, {VLLM.prompt_lengths: hist(h, bounds)})

    s = compute_signals([obs(0.0, rep(0)), obs(15.0, rep(1))])
    assert s.get("prompt_len_cv") == pytest.approx(0.706, abs=1e-3)
    assert s.get("output_len_cv") is None
