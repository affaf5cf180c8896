"""compute_signals: the whole catalogue, the serving/unknown rules, and properties over random fleets."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from signals_fixtures import hist, obs, sample, synthetic_fleet, vllm_values

import llmscale.signals.fleet as fleet_module
from llmscale.metrics.names import DCGM, VLLM
from llmscale.signals import SIGNALS, compute_signals
from llmscale.signals.arrivals import arrival_dispersion_signal
from llmscale.signals.catalog import GROUPS
from llmscale.signals.diagnostics import diagnostic_signals
from llmscale.signals.gpu import gpu_signals
from llmscale.signals.histograms import latency_signals
from llmscale.signals.kv import kv_signals
from llmscale.signals.lengths import output_length_signals
from llmscale.signals.predictors import predictor_signals
from llmscale.signals.queues import queue_signals
from llmscale.signals.rates import RATE_SIGNALS, rate_signals
from llmscale.signals.rhythm import rhythm_signals
from llmscale.signals.risk import oom_signals
from llmscale.signals.window import FleetWindow
from llmscale.types import Phase, ReplicaSample, SignalValue

#: signals a failed scrape must never lower compared with dropping the replica (or reading zeros)
LOAD_SIGNALS = (
    "queue_waiting",
    "queue_waiting_max",
    "queue_per_replica",
    "running",
    "running_per_replica",
    "kv_usage_mean",
    "kv_usage_max",
    "gpu_util_mean",
    "sm_active_mean",
    "gpu_composite_util",
    "oom_risk",
)


def _replica(name, k, *, waiting=2.0, running=10.0, kv=0.5, phase=Phase.READY):
    values = vllm_values(
        running=running,
        waiting=waiting,
        kv=kv,
        gen_tokens=1000.0 * k,
        prompt_tokens=5000.0 * k,
        preemptions=0.0,
    )
    hists = {
        VLLM.ttft: hist((5 * k, 9 * k, 10 * k, 10 * k)),
        VLLM.e2e: hist((0, 0, 10 * k, 10 * k)),
        VLLM.itl: hist((900 * k, 1000 * k, 1000 * k, 1000 * k)),
        VLLM.tpot: hist((8 * k, 10 * k, 10 * k, 10 * k)),
        VLLM.queue_time: hist((10 * k, 10 * k, 10 * k, 10 * k)),
        # output tokens per finished request: half within 100, half within 1,000 tokens
        VLLM.output_tokens: hist((5 * k, 10 * k, 10 * k), (100.0, 1000.0, math.inf)),
        VLLM.prompt_lengths: hist((2 * k, 10 * k, 10 * k), (1000.0, 5000.0, math.inf)),
    }
    return sample(name, values, hists, phase=phase)


def _window(n=6, **kw):
    return [obs(15.0 * k, _replica("a", k, **kw), _replica("b", k, **kw), gateway=1) for k in range(n)]


def test_every_catalogue_name_is_a_signal_value():
    s = compute_signals(_window())
    assert set(s.values) == set(SIGNALS)
    invalid = {k: v.note for k, v in s.values.items() if v.value is None}
    # after six ticks of a steady fleet only the rhythm of a flat load is undefined, and the model
    # drift ratios, which only the live controller computes (against its step-time model),
    # and the arrival rate, which only a source that counts arrivals (the simulator) has, and the
    # token throughput over seed 000 2.4's sub-second windows, which need 100 ms token counts
    assert set(invalid) == {
        "generation_tps_adaptive",
        "generation_tps_100ms",
        "rhythm_decay",
        "rhythm_phase",
        "model_drift_itl_ratio",
        "model_drift_ttft_ratio",
        "arrival_rate_rps",
    }
    assert all(invalid.values())
    assert s.get("queue_waiting") == 5.0
    assert s.get("request_rate_rps") == pytest.approx(2 * 10 / 15)
    assert s.get("serving_replicas") == 2.0


def test_one_observation_window():
    s = compute_signals(_window(1))
    assert set(s.values) == set(SIGNALS)
    assert s.get("queue_waiting") == 5.0
    for name in (
        "ttft_p99_s",
        "request_rate_rps",
        "kv_growth_pct_per_step",
        "load_zscore",
        "throughput_window_ms",
    ):
        assert s.get(name) is None, name
        assert s.values[name].note


def test_per_replica_as_hpa_sees_pods():
    replicas = [
        _replica("ready", 1),
        _replica("warm", 1, phase=Phase.WARMUP),
        _replica("drain", 1, phase=Phase.DRAINING),
        sample("pend", phase=Phase.PENDING, ok=False),
        sample("lost", ok=False),
    ]
    s = compute_signals([obs(0.0, *replicas)])
    assert set(s.per_replica) == {"ready", "warm", "lost"}
    assert s.per_replica["lost"] == {}
    assert s.per_replica["ready"][DCGM.GPU_UTIL] == 30.0
    assert s.unknown_replicas == 1
    assert s.get("unknown_replicas") == 1.0


def test_all_scrapes_failed_is_unknown_never_zero():
    window = [obs(15.0 * k, sample("a", ok=False), sample("b", ok=False), gateway=4) for k in range(5)]
    s = compute_signals(window)
    for name in (
        *LOAD_SIGNALS,
        "ttft_p99_s",
        "request_rate_rps",
        "effective_vram",
        "queue_entropy",
        "load_zscore",
    ):
        assert s.get(name) is None, name
    assert s.unknown_replicas == 2
    assert s.get("gateway_queue") == 4.0


replica_st = st.fixed_dictionaries(
    {
        "waiting": st.integers(0, 50).map(float),
        "running": st.integers(0, 256).map(float),
        "kv": st.floats(0.0, 1.0),
        "gpu": st.floats(0.0, 100.0),
        "sm": st.floats(0.0, 1.0),
        "copy": st.floats(0.0, 100.0),
    }
)


def _sample(name: str, r: dict[str, float], k: int) -> ReplicaSample:
    v = vllm_values(
        running=r["running"],
        waiting=r["waiting"],
        kv=r["kv"],
        gpu_util=r["gpu"],
        sm_active=r["sm"],
        mem_copy=r["copy"],
        gen_tokens=100.0 * k,
        prompt_tokens=500.0 * k,
        preemptions=float(k),
    )
    return sample(name, v, {VLLM.ttft: hist((k, 2 * k, 3 * k, 3 * k))})


def _fleet_window(replicas, *, failed=None, drop=None, zero=None, ticks=3):
    window = []
    for k in range(ticks):
        samples = []
        for i, r in enumerate(replicas):
            name = f"r{i}"
            if k == ticks - 1 and i == drop:
                continue
            if k == ticks - 1 and i == failed:
                samples.append(sample(name, ok=False))
            elif k == ticks - 1 and i == zero:
                samples.append(
                    _sample(name, dict(r, waiting=0.0, running=0.0, kv=0.0, gpu=0.0, sm=0.0, copy=0.0), k)
                )
            else:
                samples.append(_sample(name, r, k))
        window.append(obs(15.0 * k, *samples, gateway=3))
    return window


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(replica_st, min_size=2, max_size=6), st.data())
def test_a_failed_scrape_never_lowers_load_signals(replicas, data):
    i = data.draw(st.integers(0, len(replicas) - 1))
    failed = compute_signals(_fleet_window(replicas, failed=i))
    dropped = compute_signals(_fleet_window(replicas, drop=i))
    zeroed = compute_signals(_fleet_window(replicas, zero=i))
    for name in LOAD_SIGNALS:
        f, d, z = failed.get(name), dropped.get(name), zeroed.get(name)
        assert f is not None and d is not None and z is not None, name
        assert f >= d - 1e-9, name  # the same as dropping it (averages over the known replicas) ...
        assert f >= z - 1e-9, name  # ... and never the zero load AIBrix's bug reads
    assert failed.unknown_replicas == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(replica_st, min_size=1, max_size=6), st.integers(1, 8))
def test_ranges_hold_for_random_fleets(replicas, ticks):
    s = compute_signals(_fleet_window(replicas, ticks=ticks))
    for name, (unit, _, _) in SIGNALS.items():
        v = s.get(name)
        if v is None:
            continue
        assert math.isfinite(v), name
        if unit in ("ratio", "probability") and name not in ("tenant_drift", "rhythm_decay"):
            assert 0.0 <= v <= 1.0 + 1e-9, (name, v)
        if unit == "%":
            assert 0.0 <= v <= 100.0, (name, v)
        if unit in ("requests", "replicas", "req/s", "tokens/s", "tokens", "1/s", "s", "ms"):
            assert v >= 0.0, (name, v)
    assert -1.0 <= (s.get("rhythm_decay") or 0.0) <= 1.0
    assert (s.get("tenant_drift") or 0.0) >= 0.0


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.integers(1, 5), st.one_of(st.none(), st.integers(0, 100)))
def test_no_data_is_invalid_never_zero(replicas, ticks, gateway):
    # every serving scrape failed on every tick: nothing about the replicas' load is known
    failed = [sample(f"r{i}", ok=False) for i in range(replicas)]
    window = [obs(15.0 * k, *failed, gateway=gateway) for k in range(ticks)]
    s = compute_signals(window)
    assert set(s.values) == set(SIGNALS)
    for name, v in s.values.items():
        if name in ("gateway_queue", "serving_replicas", "unknown_replicas"):
            continue
        assert v.value is None, (name, v.value)
        assert v.note, name
    assert s.get("unknown_replicas") == replicas


def _eager(window):
    """Every group computed up front, in the catalogue's order: what compute_signals did before its
    values became lazy, kept here as the reference the lazy mapping must equal."""
    fw = FleetWindow.build(window)
    values = {}
    values.update(queue_signals(fw))
    latency, ttft = latency_signals(fw)
    values.update(latency)
    values.update(rate_signals(fw)[0])
    values.update(kv_signals(fw))
    values.update(gpu_signals(fw))
    values.update(oom_signals(fw))
    values.update(rhythm_signals(fw))
    values.update(predictor_signals(ttft, len(fw.observations) - 1, values))
    values.update(diagnostic_signals(fw))
    values.update(fleet_module._MODEL_DRIFT)  # placeholders: the live controller sets them
    values.update(output_length_signals(fw))
    values["arrival_dispersion"] = arrival_dispersion_signal(fw)
    for name in SIGNALS:
        values.setdefault(name, SignalValue(None, "not computed"))
    return values


def _restarting_window():
    # replica "a" restarts mid-window (its counters drop), "b" is drained, "c" fails its last scrape
    window = []
    for k in range(8):
        j = k if k < 4 else k - 4
        a = _replica("a", j + 1, waiting=float(k), running=3.0 * k)
        b = _replica("b", k + 1, phase=Phase.DRAINING if k >= 5 else Phase.READY)
        c = sample("c", ok=False) if k == 7 else _replica("c", 2 * k + 1, kv=0.1 * k)
        window.append(obs(10.0 * k, a, b, c, gateway=k % 3))
    return window


@pytest.mark.parametrize(
    "window",
    [
        pytest.param(_window(), id="steady"),
        pytest.param(_window(1), id="one-observation"),
        pytest.param(_restarting_window(), id="restart-drain-failure"),
        pytest.param([obs(0.0, sample("p", phase=Phase.PENDING, ok=False), gateway=3)], id="nothing-serving"),
        pytest.param(synthetic_fleet(replicas=12, observations=20, tick_s=2.0), id="synthetic-2s-tick"),
        pytest.param(synthetic_fleet(replicas=12, observations=20, tick_s=15.0, seed=3), id="synthetic-15s"),
    ],
)
def test_lazy_values_equal_eager(window):
    eager = _eager(window)
    # the whole mapping, in the same order
    full = compute_signals(window).values
    assert list(full) == list(eager)
    assert dict(full.items()) == eager
    assert len(full) == len(eager) and set(full) == set(SIGNALS)
    # each name read first, alone, from a fresh window: groups computed in any order agree
    for name in reversed(list(eager)):
        assert compute_signals(window).values[name] == eager[name], name


def test_every_catalogue_group_has_the_function_that_fills_it():
    assert set(fleet_module._COMPUTE) == set(GROUPS)
    assert set(fleet_module._QUEUE_NAMES) | set(fleet_module._ORDER_AFTER_QUEUES) == set(SIGNALS)


@pytest.mark.parametrize("group", list(GROUPS))
@pytest.mark.parametrize(
    "window",
    [
        pytest.param(_restarting_window(), id="restart-drain-failure"),
        pytest.param([obs(0.0, sample("p", phase=Phase.PENDING, ok=False), gateway=3)], id="nothing-serving"),
    ],
)
def test_each_group_fills_exactly_the_names_the_catalogue_gives_it(window, group):
    # The catalogue is the one list of names: a group's function filling a name the catalogue puts
    # elsewhere (or none) would make a read of that name compute the wrong group.
    values = fleet_module.SignalValues(FleetWindow.build(window))
    assert set(fleet_module._COMPUTE[group](values)) == set(GROUPS[group])


def test_the_rate_group_order_is_the_catalogue_order():
    assert tuple(n for n in SIGNALS if SIGNALS[n].group in ("counter_rates", "step_rates")) == RATE_SIGNALS
    assert list(rate_signals(FleetWindow.build(synthetic_fleet(replicas=2, observations=4)))[0]) == list(
        RATE_SIGNALS
    )


def test_previous_window_totals_are_reused_and_equal():
    window = synthetic_fleet(replicas=6, observations=12, tick_s=5.0)
    before = FleetWindow.build(window[:-1])
    assert len(before.totals) == 11  # computes every observation's totals
    after = FleetWindow.build(window[1:], previous=before)
    fresh = FleetWindow.build(window[1:])
    assert after.totals == fresh.totals
    assert after._totals[0] is before._totals[1]  # carried over, not recomputed
