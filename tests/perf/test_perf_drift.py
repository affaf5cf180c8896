"""The model-drift core (``perf/drift.py``): predictions, ratio, the warning's hysteresis, adjustment."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmscale.errors import ConfigError
from llmscale.perf import PerfModel, get_perf_model
from llmscale.perf.coefficients import load_coefficients
from llmscale.perf.drift import (
    AdaptConfig,
    AdaptState,
    DriftAlarm,
    Evidence,
    OperatingPoint,
    Reading,
    adapt_step,
    alarm_step,
    elasticities,
    predict_itl_s,
    predict_ttft_s,
    quantized,
)
from llmscale.perf.profile import FactorScale, profile_coefficients, scale_coefficients

PERF = get_perf_model("llama-3-8b", "h100-80gb", 1)


def _model(**factors: float) -> PerfModel:
    return PerfModel("llama-3-8b", "h100-80gb", 1, scale_coefficients(load_coefficients(), factors))


# -- the ratio ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("observed", "predicted", "ratio"),
    [
        pytest.param(0.014, 0.010, 1.4, id="slower-than-modelled"),
        pytest.param(0.0085, 0.010, 0.85, id="faster-than-modelled"),
        pytest.param(0.010, 0.010, 1.0, id="as-modelled"),
        pytest.param(None, 0.010, None, id="nothing-observed"),
        pytest.param(0.010, None, None, id="no-prediction"),
        pytest.param(0.0, 0.010, None, id="zero-observed"),
        pytest.param(0.010, 0.0, None, id="zero-predicted"),
    ],
)
def test_reading_ratio_is_observed_over_predicted(observed, predicted, ratio):
    r = Reading("itl", observed, predicted, 2500.0)
    assert r.ratio == (None if ratio is None else pytest.approx(ratio))
    assert r.as_json()["ratio"] == (None if ratio is None else pytest.approx(ratio, abs=1e-4))


# -- predictions ----------------------------------------------------------------------------


def test_itl_without_prefills_is_one_decode_step():
    op = OperatingPoint(batch=16, context_tokens=1200, prompt_tokens=1000, prefill_rps=0.0)
    assert predict_itl_s(PERF, op) == pytest.approx(PERF.decode(16, 1200).duration_s)


def test_itl_is_stretched_by_the_prefill_share():
    # 2 prefills/s of 1,000 tokens next to 16 decodes: each adds (mixed step - decode step) of
    # engine time, so decode tokens wait rho = 2 x that share of each second
    op = OperatingPoint(batch=16, context_tokens=1200, prompt_tokens=1000, prefill_rps=2.0)
    t_dec = PERF.decode(16, 1200).duration_s
    t_p = PERF.step(1000, 1000 * 1001 / 2.0, 1, 16, 16 * 1200).duration_s - t_dec
    assert t_p > 0.01  # a 1,000-token prompt is tens of ms on an H100
    assert predict_itl_s(PERF, op) == pytest.approx(t_dec / (1.0 - 2.0 * t_p))


def test_itl_at_a_fractional_batch_lies_between_the_whole_batches():
    lo = predict_itl_s(PERF, OperatingPoint(7, 1200, 1000, 0.0))
    hi = predict_itl_s(PERF, OperatingPoint(8, 1200, 1000, 0.0))
    mid = predict_itl_s(PERF, OperatingPoint(7.25, 1200, 1000, 0.0))
    assert mid == pytest.approx(lo + 0.25 * (hi - lo))


def test_ttft_on_an_idle_engine_is_one_prefill():
    # nothing running: no step in progress to wait for, and the prefill has the step to itself
    op = OperatingPoint(batch=0, context_tokens=1200, prompt_tokens=1000, prefill_rps=0.5)
    assert predict_ttft_s(PERF, op) == pytest.approx(PERF.prefill(1000).duration_s)


def test_ttft_next_to_a_batch_waits_half_a_step_and_shares_the_step():
    op = OperatingPoint(batch=8, context_tokens=1200, prompt_tokens=1000, prefill_rps=0.0)
    mixed = PERF.step(1000, 1000 * 1001 / 2.0, 1, 8, 8 * 1200).duration_s
    assert predict_ttft_s(PERF, op) == pytest.approx(0.5 * PERF.decode(8, 1200).duration_s + mixed)


def test_ttft_of_a_prompt_beyond_the_token_budget_is_chunked():
    # 10,000 tokens with a budget of 4,096 and 96 decodes: chunks of 4,000, 4,000, 2,000
    op = OperatingPoint(
        batch=96, context_tokens=500, prompt_tokens=10_000, prefill_rps=0.0, budget_tokens=4096
    )
    chunks = [(4000, 0), (4000, 4000), (2000, 8000)]
    steps = sum(PERF.step(c, c * (done + (c + 1) / 2.0), 1, 96, 96 * 500).duration_s for c, done in chunks)
    assert predict_ttft_s(PERF, op) == pytest.approx(0.5 * PERF.decode(96, 500).duration_s + steps)


@pytest.mark.parametrize("batch", [1, 16, 64, 200])
def test_decode_elasticities_are_memory_and_host_and_sum_to_one(batch):
    # Every time in the model is a host time or bytes / bandwidth or FLOPs / FLOP rate: slowing all
    # three by k slows a step by exactly k, so e_host - e_bandwidth - e_compute = 1. A decode step
    # of a small batch has no compute-bound part; at 200 sequences the GEMMs start to be.
    op = OperatingPoint(batch=batch, context_tokens=1200, prompt_tokens=1000, prefill_rps=0.0)

    def predicted(s: FactorScale) -> float:
        return predict_itl_s(PerfModel("llama-3-8b", "h100-80gb", 1, profile_coefficients(None, s)), op)

    e = elasticities(predicted, FactorScale(), ("bandwidth", "host", "compute"))
    assert e["bandwidth"] < -0.3 and e["host"] > 0.3
    assert e["host"] - e["bandwidth"] - e["compute"] == pytest.approx(1.0, abs=0.005)
    if batch <= 64:
        assert abs(e["compute"]) < 0.01


def test_a_bandwidth_of_0_6_reads_as_the_docstrings_1_43():
    # the module docstring's worked number: batch 16, 1,200 tokens of context
    op = OperatingPoint(batch=16, context_tokens=1200, prompt_tokens=1000, prefill_rps=0.0)
    ratio = predict_itl_s(_model(bandwidth=0.6), op) / predict_itl_s(PERF, op)
    assert ratio == pytest.approx(1.43, abs=0.005)


# -- the warning ----------------------------------------------------------------------------

# (ratios tick by tick, the events expected): enters beyond 15% either way, leaves within 10%
ALARM_CASES = [
    pytest.param([1.0, 1.05, 1.14, 1.15], [None, None, None, None], id="within-15pct-no-warning"),
    pytest.param([1.0, 1.16, 1.4, 1.3], [None, "drifting", None, None], id="one-line-while-it-lasts"),
    pytest.param([1.2, 1.12, 1.14, 1.11], ["drifting", None, None, None], id="hovering-in-the-band"),
    pytest.param([1.2, 1.12, 1.09, 1.2], ["drifting", None, "back", "drifting"], id="back-then-again"),
    pytest.param([0.84, 0.95], ["drifting", "back"], id="faster-counts-too"),
    pytest.param([1.3, None, None, 1.3], ["drifting", None, None, None], id="a-gap-is-not-a-recovery"),
    pytest.param([None, 1.0], [None, None], id="no-data-no-alarm"),
]


@pytest.mark.parametrize(("ratios", "events"), ALARM_CASES)
def test_alarm_hysteresis(ratios, events):
    alarm = DriftAlarm()
    got = []
    for k, r in enumerate(ratios):
        alarm, event = alarm_step(alarm, r, now_s=10.0 * k)
        got.append(event)
    assert got == events


def test_alarm_remembers_when_it_started():
    alarm, _ = alarm_step(DriftAlarm(), 1.3, now_s=40.0)
    alarm, _ = alarm_step(alarm, 1.4, now_s=50.0)
    assert alarm == DriftAlarm(True, 40.0)


# -- the adjustment -------------------------------------------------------------------------

WIDE = AdaptConfig(time_constant_s=60.0, max_step=0.5)


def _bw(log_ratio: float, e: float = -1.0) -> Evidence:
    return Evidence("itl", log_ratio, {"bandwidth": e})


@pytest.mark.parametrize(
    ("cfg", "state", "evidence", "now_s", "expected_bw"),
    [
        # the first tick only starts the clock: dt = 0, nothing moves
        pytest.param(WIDE, AdaptState(), [_bw(0.3)], 100.0, 1.0, id="first-tick-starts-the-clock"),
        # dt = tau: 63.2% of the way; the target for a 10% slow fleet with e = -1 is x exp(-0.1)
        pytest.param(
            WIDE,
            AdaptState(last_s=40.0),
            [_bw(0.1)],
            100.0,
            math.exp(-0.1 * (1 - math.exp(-1))),
            id="ewma-gain-over-one-time-constant",
        ),
        # 1.4x slow asks for x0.71, the 3% cap allows x1/1.03
        pytest.param(
            AdaptConfig(time_constant_s=60.0),
            AdaptState(last_s=0.0),
            [_bw(math.log(1.4))],
            600.0,
            1 / 1.03,
            id="at-most-3pct-per-tick",
        ),
        # a fleet faster than modelled raises the factor, by at most 3%
        pytest.param(
            AdaptConfig(time_constant_s=60.0),
            AdaptState(last_s=0.0),
            [_bw(math.log(0.7))],
            600.0,
            1.03,
            id="faster-raises-it",
        ),
        # already at the bound: a further slow window moves nothing
        pytest.param(
            WIDE,
            AdaptState(FactorScale(bandwidth=0.5), 0.0),
            [_bw(math.log(1.5))],
            600.0,
            0.5,
            id="held-at-half-the-start",
        ),
        pytest.param(
            WIDE,
            AdaptState(FactorScale(bandwidth=1.9), 0.0),
            [_bw(math.log(0.5))],
            600.0,
            2.0,
            id="held-at-twice-the-start",
        ),
        # an insensitive window (|e| < 0.2): a short prompt's TTFT says nothing about compute
        pytest.param(
            WIDE, AdaptState(last_s=0.0), [_bw(0.5, e=-0.1)], 600.0, 1.0, id="insensitive-window-held"
        ),
        pytest.param(WIDE, AdaptState(last_s=0.0), [], 600.0, 1.0, id="no-evidence-no-move"),
    ],
)
def test_adapt_step(cfg, state, evidence, now_s, expected_bw):
    new, notes = adapt_step(state, evidence, cfg, now_s)
    assert new.scale.bandwidth == pytest.approx(expected_bw)
    assert new.last_s == now_s
    assert (new.scale.host, new.scale.compute, new.scale.comm) == (1.0, 1.0, 1.0)
    if evidence and state.last_s is not None and expected_bw == 1.0:
        assert notes["itl"].startswith("held")


def test_min_norm_split_is_the_docstrings_worked_number():
    # ln 1.42 along e = (-0.63, +0.37) (batch 16: -0.632, +0.368): bandwidth x0.66, host x1.27
    # when fully applied
    log_ratio = math.log(14.708 / 10.347)
    ev = Evidence("itl", log_ratio, {"bandwidth": -0.632, "host": 0.368})
    full = AdaptConfig(time_constant_s=1e-6, max_step=1.0)
    new, _ = adapt_step(AdaptState(last_s=0.0), [ev], full, 1.0)
    assert new.scale.bandwidth == pytest.approx(0.66, abs=0.002)
    assert new.scale.host == pytest.approx(1.27, abs=0.005)
    # ... which removes the log error to first order: e . delta = ln 1.42
    moved = -0.632 * math.log(new.scale.bandwidth) + 0.368 * math.log(new.scale.host)
    assert moved == pytest.approx(log_ratio)


def test_a_capped_step_keeps_its_direction():
    # the same 1.42x slow window at 3% a tick: bandwidth, the larger share, moves the full 3% and
    # host 0.368 / 0.632 of it, not 3% as well
    ev = Evidence("itl", math.log(1.42), {"bandwidth": -0.632, "host": 0.368})
    new, notes = adapt_step(AdaptState(last_s=0.0), [ev], AdaptConfig(time_constant_s=1e-6), 1.0)
    assert new.scale.bandwidth == pytest.approx(1 / 1.03)
    assert math.log(new.scale.host) == pytest.approx(math.log(1.03) * 0.368 / 0.632)
    assert notes["itl"] == "bandwidth -2.91%, host +1.74%"


def test_each_quantity_moves_only_its_own_factors():
    itl = Evidence("itl", 0.2, {"bandwidth": -0.6, "host": 0.4})
    ttft = Evidence("ttft", -0.2, {"compute": -0.7})
    new, notes = adapt_step(AdaptState(last_s=0.0), [itl, ttft], WIDE, 30.0)
    s = new.scale
    assert s.bandwidth < 1.0 < s.host and s.compute > 1.0 and s.comm == 1.0
    assert set(notes) == {"itl", "ttft"}


def test_repeated_windows_converge_like_an_ewma():
    # The fleet is a model with bandwidth 0.6 and the controller starts at 1: each tick's window
    # asks for the whole way, and the log error left after n ticks is (1 - g)^n of the first.
    cfg = AdaptConfig(time_constant_s=50.0, max_step=0.5)
    state = AdaptState(last_s=0.0)
    g = 1.0 - math.exp(-5.0 / 50.0)
    for n in range(1, 40):
        log_ratio = math.log(state.scale.bandwidth / 0.6)  # t ~ 1 / bandwidth: e = -1
        state, _ = adapt_step(state, [_bw(log_ratio)], cfg, 5.0 * n)
        assert math.log(state.scale.bandwidth / 0.6) == pytest.approx(math.log(1 / 0.6) * (1 - g) ** n)
    assert state.scale.bandwidth == pytest.approx(0.6, rel=0.02)


def test_adapt_config_is_validated():
    with pytest.raises(ConfigError, match="time_constant_s"):
        AdaptConfig(time_constant_s=0.0)
    with pytest.raises(ConfigError, match="max_step"):
        AdaptConfig(max_step=0.0)
    with pytest.raises(ConfigError, match="bound"):
        AdaptConfig(bound=1.0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(1.0, 1.0, id="identity"),
        pytest.param(1.004, 1.0, id="below-half-a-step"),
        pytest.param(1.006, math.exp(0.01), id="rounds-up"),
        pytest.param(0.68, math.exp(-0.39), id="log-steps"),
    ],
)
def test_quantized(value, expected):
    assert quantized(FactorScale(bandwidth=value)).bandwidth == pytest.approx(expected)


def test_factor_scale_multiplies_the_profiles_factors():
    scale = FactorScale(bandwidth=0.9, host=1.1)
    assert scale.applied_to({"bandwidth": 0.8}) == pytest.approx(
        {"bandwidth": 0.72, "compute": 1.0, "host": 1.1, "comm": 1.0}
    )
    with pytest.raises(ConfigError, match="bandwidth"):
        FactorScale(bandwidth=0.0)


def test_scaled_models_are_the_profile_times_the_scale():
    scaled = get_perf_model("llama-3-8b", "h100-80gb", 1, scale=FactorScale(bandwidth=0.6))
    assert scaled.decode(16, 1200).duration_s == pytest.approx(
        _model(bandwidth=0.6).decode(16, 1200).duration_s
    )
    # the identity scale is the committed model itself (memoised)
    assert get_perf_model("llama-3-8b", "h100-80gb", 1, scale=FactorScale()) is PERF
    assert replace(FactorScale(), host=2.0).identity is False
