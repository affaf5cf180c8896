"""The simulated DCGM counters mean what DCGM's mean: GPU_UTIL is "work in flight", the profiling
fields say what the SMs, tensor pipes and HBM did (src/llmscale/sim/gpu_counters.py).

Fleet-level tests observe one replica of Llama-3-8B on an H100 (the real perf model) through
the exporter, over a window in which the test first checks, from the requests' own arrival
and finish times, that at least one request was in flight at every instant.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.metrics.names import DCGM
from llmscale.metrics.names import VllmMetric as V
from llmscale.perf import get_perf_model
from llmscale.sim.config import SimConfig
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.sim.gpu_counters import (
    MAX_WARPS_PER_SM,
    WARPS_PER_ACTIVE_SM,
    GpuCounterSpec,
    gpu_counters,
)

#: Llama-3-8B's published parameter count; a forward pass costs ~2 FLOPs per parameter per token.
LLAMA3_8B_PARAMS = 8.03e9
T0_S, T1_S = 20.0, 50.0  # the observed window

_PERF = get_perf_model("llama-3-8b", "h100-80gb", 1)
_SPEC = GpuCounterSpec.from_perf(_PERF)


def _observe_window(gap_s: float, input_tokens: int, output_tokens: int, n: int):
    """One replica serving ``n`` identical requests ``gap_s`` apart; the replica's sample at T1_S
    (its DCGM fields average over [T0_S, T1_S]) and the requests' in-flight intervals."""
    arrivals = np.arange(n) * gap_s
    fleet = Fleet(
        _PERF,
        SimConfig(),
        arrivals,
        np.full(n, input_tokens),
        np.full(n, output_tokens),
        initial_replicas=1,
        gpus_per_replica=1,
    )
    source = SimMetricSource(fleet)
    fleet.run_until(T0_S)
    first = source.observe(T0_S).replicas[0]
    fleet.run_until(T1_S)
    last = source.observe(T1_S).replicas[0]
    fleet.run_until(T1_S + 600.0)
    spans = [(float(a), float(a + e)) for a, e in zip(arrivals, fleet.e2e_s, strict=True)]
    return first, last, spans


def _always_in_flight(spans: list[tuple[float, float]], t0: float, t1: float) -> bool:
    """Whether the union of the in-flight intervals covers [t0, t1] (NaN finish: still in flight)."""
    covered = t0
    for start, end in sorted(spans):
        if start > covered:
            break
        covered = max(covered, math.inf if math.isnan(end) else end)
    return covered >= t1


# -- the formulas -------------------------------------------------------------------------------


def test_an_idle_or_empty_period_reads_zero_everywhere():
    assert all(v == 0.0 for v in gpu_counters(_SPEC, 30.0, 0.0, 0.0, 0.0))
    assert all(v == 0.0 for v in gpu_counters(_SPEC, 0.0, 1.0, 1.0, 1e9))


def test_a_batch1_decode_step_reads_as_dcgm_defines_its_fields():
    c = _PERF.step(0, 0.0, 0, 1, 1000)
    g = gpu_counters(_SPEC, c.duration_s, c.duration_s, c.sm_busy_s, c.dram_bytes)
    assert g.gpu_util_pct == 100.0 and g.gr_engine_active == 1.0
    # Llama-3-8B's 7.5e9 matmul and LM-head parameters in BF16 (15.0 GB) plus 1,000 tokens of
    # KV and the activations, over the step, as a share of 3.35 TB/s ...
    assert 15.0e9 <= c.dram_bytes <= 15.3e9
    assert g.dram_active == pytest.approx(c.dram_bytes / 3.35e12 / c.duration_s)
    assert g.mem_copy_util_pct == pytest.approx(100.0 * g.dram_active)
    # ... which a streaming kernel moves at the fitted share of peak: the SMs hold warps meanwhile
    assert g.sm_active == pytest.approx(g.dram_active / _SPEC.stream_bw_eff)
    assert g.sm_active < 1.0
    # 12 of 64 warp slots filled while active,
    assert g.sm_occupancy == pytest.approx(g.sm_active * 12 / 64)
    # and the tensor pipes do ~2 FLOPs per parameter for one token at 989 TFLOP/s: under 1 %.
    assert g.tensor_active == pytest.approx(2 * 7.5e9 / 989e12 / c.duration_s, rel=0.05)
    assert g.tensor_active < 0.01


@given(
    period=st.floats(1e-3, 1e3),
    active=st.floats(0.0, 1.0),
    busy=st.floats(0.0, 1.0),
    dram=st.floats(0.0, 2.0),
)
def test_counters_are_ratios_ordered_as_the_hardware_orders_them(period, active, busy, dram):
    # shares of the period (dram in units of peak HBM bytes over the period; > 1 is clipped)
    g = gpu_counters(_SPEC, period, active * period, busy * period, dram * _SPEC.hbm_bytes_s * period)
    for v in (g.gr_engine_active, g.sm_active, g.sm_occupancy, g.tensor_active, g.dram_active):
        assert 0.0 <= v <= 1.0
    assert g.gpu_util_pct == pytest.approx(100.0 * g.gr_engine_active)
    assert g.mem_copy_util_pct == pytest.approx(100.0 * g.dram_active)
    # a tensor pipe runs only on an active SM, an SM only while the engine is active
    assert g.tensor_active <= g.sm_active <= g.gr_engine_active
    assert g.sm_occupancy == pytest.approx(g.sm_active * WARPS_PER_ACTIVE_SM / MAX_WARPS_PER_SM)
    assert g.sm_occupancy <= g.sm_active
    if g.gr_engine_active > g.sm_active:  # not capped: the SMs wait for every byte HBM moves
        assert g.sm_active >= g.dram_active


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        pytest.param("hbm_bytes_s", 0.0, "hbm_bytes_s = 0.0, must be > 0", id="no-bandwidth"),
        pytest.param("step_flops_s", 2e15, "cannot outrun the tensor cores", id="faster-than-peak"),
    ],
)
def test_a_spec_that_cannot_be_rejects_with_the_field(field, value, message):
    kwargs = {"peak_flops_s": 989e12, "step_flops_s": 567e12, "hbm_bytes_s": 3.35e12, "stream_bw_eff": 0.8}
    kwargs[field] = value
    with pytest.raises(ValueError, match=message):
        GpuCounterSpec(**kwargs)


# -- a replica observed through the exporter ------------------------------------------------------


def test_idle_replica_reads_zero_gpu_utilisation_and_activity():
    first, last, _ = _observe_window(gap_s=1.0, input_tokens=100, output_tokens=10, n=0)
    for s in (first, last):
        for name in (DCGM.GPU_UTIL, DCGM.MEM_COPY_UTIL, DCGM.GR_ENGINE_ACTIVE, DCGM.SM_ACTIVE):
            assert s.values[name] == 0.0
        for name in (DCGM.SM_OCCUPANCY, DCGM.TENSOR_ACTIVE, DCGM.DRAM_ACTIVE):
            assert s.values[name] == 0.0
        assert s.values[DCGM.FB_USED] > 0.0  # weights and the KV pool stay resident


@pytest.fixture(scope="module")
def decode():
    """Bandwidth-bound: 200-token prompts, 400-token answers, two a second (~11 decoding at once)."""
    return _observe_window(gap_s=0.5, input_tokens=200, output_tokens=400, n=200)


@pytest.fixture(scope="module")
def prefill():
    """Compute-bound: 3,000-token prompts, 8-token answers, ten a second (about one replica's capacity)."""
    return _observe_window(gap_s=0.1, input_tokens=3000, output_tokens=8, n=1000)


@pytest.mark.parametrize("load", ["decode", "prefill"])
def test_gpu_util_reads_busy_whenever_a_request_is_in_flight(load, request):
    _, s, spans = request.getfixturevalue(load)
    assert _always_in_flight(spans, T0_S, T1_S)
    # NVML: "percent of time ... during which one or more kernels was executing"
    assert s.values[DCGM.GPU_UTIL] >= 90.0
    assert s.values[DCGM.GR_ENGINE_ACTIVE] >= 0.9


def test_bandwidth_bound_decode_reads_low_sm_and_tensor_activity_while_hbm_is_the_busy_part(decode):
    _, s, _ = decode
    v = s.values
    # The densest decode step is a batch of one (every further sequence adds host time, not HBM
    # time): its SMs wait on the weight stream for the step's share the model gives it; a busier
    # decode reads no more. And the SMs do almost no math.
    densest = _PERF.step(0, 0.0, 0, 1, 600)
    bound = gpu_counters(_SPEC, densest.duration_s, densest.duration_s, densest.sm_busy_s, densest.dram_bytes)
    assert v[DCGM.SM_ACTIVE] <= bound.sm_active < 1.0
    assert v[DCGM.TENSOR_ACTIVE] <= 0.05
    assert v[DCGM.DRAM_ACTIVE] >= 5.0 * v[DCGM.TENSOR_ACTIVE]
    assert v[DCGM.TENSOR_ACTIVE] < v[DCGM.SM_ACTIVE] < v[DCGM.GPU_UTIL] / 100.0


def test_sm_and_tensor_activity_rise_with_the_math_while_gpu_util_cannot(decode, prefill):
    (_, light, _), (_, heavy, _) = decode, prefill
    # both read "busy"...
    assert light.values[DCGM.GPU_UTIL] >= 90.0 and heavy.values[DCGM.GPU_UTIL] >= 90.0
    # ...while the prefill stream does more than ten times the decode stream's math per second
    assert heavy.values[DCGM.TENSOR_ACTIVE] >= 10.0 * light.values[DCGM.TENSOR_ACTIVE]
    # a prefill step of 2,048 tokens or more keeps its SMs on math for most of the step (the
    # model: 49.0 of 60.9 ms at 2,048 tokens, 218 of 292 ms at 8,192)
    for tokens in (2048, 8192):
        c = _PERF.step(tokens, tokens * tokens / 2.0, 1, 0, 0)
        assert c.sm_busy_s / c.duration_s >= 0.65
    assert heavy.values[DCGM.SM_ACTIVE] >= 0.65
    assert heavy.values[DCGM.SM_ACTIVE] > light.values[DCGM.SM_ACTIVE]
    assert heavy.values[DCGM.SM_OCCUPANCY] > light.values[DCGM.SM_OCCUPANCY]
    # and the bandwidth-bound one moves more bytes per second
    assert light.values[DCGM.DRAM_ACTIVE] > heavy.values[DCGM.DRAM_ACTIVE]


@pytest.mark.parametrize("load", ["decode", "prefill"])
def test_tensor_activity_accounts_for_two_flops_per_parameter_per_token_served(load, request):
    first, last, _ = request.getfixturevalue(load)
    tokens = sum(last.values[n] - first.values[n] for n in (V.PROMPT_TOKENS, V.GENERATION_TOKENS))
    flops = last.values[DCGM.TENSOR_ACTIVE] * _SPEC.peak_flops_s * (T1_S - T0_S)
    # 2 x 8.03e9 FLOPs a token (the LM head runs once per sequence, attention adds per context
    # token): within 15 %, and the window edges cut at most a step or a prefill chunk
    assert flops == pytest.approx(2.0 * LLAMA3_8B_PARAMS * tokens, rel=0.15)
