"""``slo`` plans an FP8 fleet with the FP8 capacity model (docs/fp8.md, "The capacity model").

The deployment's number formats reach the one capacity model (perf/replica_tails.py): FP8 weights
stream half the linear-layer bytes per decode step, an FP8 KV cache holds twice the tokens, so one
replica carries more requests within the SLO. Planned as bf16, an FP8 fleet is over-provisioned.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.deployment import Deployment
from llmscale.perf import get_perf_model
from llmscale.perf.replica_tails import TailModel
from llmscale.policies.base import create_policy
from llmscale.policies.slo import SloPolicy
from llmscale.workloads.synthetic import poisson

FORMATS = {
    "bf16": ("none", "auto"),
    "fp8-weights": ("fp8", "auto"),
    "fp8-kv": ("none", "fp8"),
    "fp8-both": ("fp8", "fp8"),
}


def _slo(formats: str) -> SloPolicy:
    q, kv = FORMATS[formats]
    policy = create_policy("slo", Deployment(quantization=q, kv_cache_dtype=kv), {})
    assert isinstance(policy, SloPolicy)
    return policy


@pytest.mark.parametrize(
    ("prompt", "output"),
    [
        pytest.param(1155, 211, id="chat"),
        pytest.param(16000, 600, id="long-context"),
    ],
)
@pytest.mark.parametrize("formats", ["fp8-weights", "fp8-kv", "fp8-both"])
def test_each_fp8_format_raises_the_capacity_slo_plans_with(formats, prompt, output):
    bf16, fp8 = _slo("bf16"), _slo(formats)
    assert fp8.config.precision is not None and fp8.config.precision.label() != "bf16 weights, bf16 KV"
    assert bf16.config.precision is None  # bf16 asks the capacity model exactly as before
    cap_bf16 = bf16.capacity(prompt, output, 2.0)
    cap_fp8 = fp8.capacity(prompt, output, 2.0)
    assert cap_fp8 > cap_bf16 * 1.03, (cap_fp8, cap_bf16)
    # at the rate that fills bf16 replicas, the FP8 replicas miss fewer requests
    rate = 4 * cap_bf16
    assert fp8.miss_share(rate, 4, prompt, output, 2.0) <= bf16.miss_share(rate, 4, prompt, output, 2.0)


def test_the_physics_behind_it_more_kv_tokens_and_a_faster_decode_step():
    def tails(q: str, kv: str) -> TailModel:
        return TailModel(get_perf_model("llama-3-8b", "h100-80gb", 1, precision=_slo_precision(q, kv)))

    bf16, kv8, w8 = tails("none", "auto"), tails("none", "fp8"), tails("fp8", "auto")
    # the KV cache holds twice the tokens at 1 byte a value; FP8 weights free ~7 GB for it too
    assert kv8.kv_tokens == pytest.approx(2 * bf16.kv_tokens, rel=1e-3)
    assert bf16.kv_tokens < w8.kv_tokens < kv8.kv_tokens
    # a decode step streams half the linear weights (and half the KV bytes with FP8 KV)
    assert w8.perf.step(0, 0.0, 0, 32, 32 * 1024)[0] < 0.9 * bf16.perf.step(0, 0.0, 0, 32, 32 * 1024)[0]
    # long contexts are bound by the KV cache: there FP8 KV buys more capacity than FP8 weights
    assert _slo("fp8-kv").capacity(16000, 600, 2.0) > _slo("fp8-weights").capacity(16000, 600, 2.0)


def _slo_precision(q: str, kv: str):
    return Deployment(quantization=q, kv_cache_dtype=kv).precision


def _run(workload, settings, policy=None):
    out = io.StringIO()
    summary = run_policy(workload, "slo", settings, policy=policy, decisions_out=out).summary
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    caps = [r["inputs"].get("capacity_rps_per_replica") for r in lines]
    return summary, [c for c in caps if c is not None]


def test_an_fp8_backtest_holds_the_slo_with_fewer_gpu_hours_when_slo_plans_fp8():
    # 40 req/s of the default lengths for 400 s on FP8 weights + KV (Llama-3-8B / H100): the same
    # simulated fleet, once planned with its own formats, once as if it were bf16. Bounded: ~16k
    # requests, two runs.
    w = poisson(40.0, 400.0, seed=5)
    fp8 = BacktestSettings(
        initial_replicas=4, min_replicas=1, max_replicas=12, quantization="fp8", kv_cache_dtype="fp8"
    )
    as_bf16 = create_policy("slo", replace(fp8.deployment(), quantization="none", kv_cache_dtype="auto"), {})
    own, own_caps = _run(w, fp8)
    blind, blind_caps = _run(w, fp8, as_bf16)
    # the capacity per replica in the decision log is the FP8 one: ~18.9 req/s against ~13.3
    assert min(own_caps[-5:]) > 1.2 * max(blind_caps[-5:])
    # both hold the SLO (every feasible request within it: the fleet is large enough either way) ...
    assert own["slo_attainment_feasible"] >= 0.99
    assert own["slo_attainment_feasible"] >= blind["slo_attainment_feasible"] - 0.002
    # ... and the FP8 plan does it with fewer GPU-hours (measured 0.392 against 0.448)
    assert own["gpu_hours"] < 0.93 * blind["gpu_hours"]
