"""The live controller's model-drift hook (``controller/drift.py``) against a simulated fleet whose engine
is not the one the controller assumes.

The fleet is the backtest's simulator driven in simulated time (``ManualClock``-style explicit
``now_s``), its replicas built with a calibration profile whose HBM bandwidth factor is 0.6, and
observed through the simulator's exporter under vLLM's names; the controller's step-time model has
no profile (factor 1) unless a test says otherwise. Deterministic: seeded arrivals, no wall time.
"""

from __future__ import annotations

import io
import json
import logging
import math
from typing import Any

import numpy as np
import pytest
import yaml
from live_fakes import PLAIN

from llmscale.clock import ManualClock
from llmscale.config import parse_config
from llmscale.controller.decision_log import DecisionLog, policy_version
from llmscale.controller.drift import (
    DRIFT_METRICS,
    AdjustablePolicy,
    DriftMonitor,
    DriftSettings,
    measure,
)
from llmscale.controller.live import LiveController, PolicyRun
from llmscale.controller.server import ControllerMetrics
from llmscale.deployment import Deployment
from llmscale.perf import get_perf_model
from llmscale.perf.drift import AdaptConfig, DriftLimits
from llmscale.perf.profile import FactorScale
from llmscale.policies.base import create_policy
from llmscale.signals.drift import DriftWindow
from llmscale.signals.fleet import compute_signals
from llmscale.sim.config import SimConfig
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.types import Mode, Observation, Phase, ReplicaView
from llmscale.wiring import build_drift, policy_run

MODEL, GPU = "llama-3-8b", "h100-80gb"
TICK_S = 5.0


def _profile(path, bandwidth: float) -> str:
    doc = {
        "format": "llmscale calibration profile v1",
        "model": MODEL,
        "gpu": GPU,
        "tp": 1,
        "factors": {"bandwidth": bandwidth, "compute": 1.0, "host": 1.0, "comm": 1.0},
    }
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def slow_hbm(tmp_path) -> str:
    """A profile of the deployed engine: HBM at 0.6 of what the committed model assumes."""
    return _profile(tmp_path / "slow-hbm.yaml", 0.6)


class SimFleet:
    """A one-replica simulated fleet under Poisson load (3 req/s of ~1,000 + ~200 tokens, seeded):
    a MetricSource and a Cluster listing its replicas, both at explicit times."""

    def __init__(self, calibration: str, *, duration_s: float = 400.0, rate_rps: float = 3.0) -> None:
        rng = np.random.default_rng(7)
        n = int(duration_s * rate_rps)
        arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, n))
        prompts = rng.integers(600, 1400, n).astype(np.int64)
        outputs = rng.integers(100, 300, n).astype(np.int64)
        perf = get_perf_model(MODEL, GPU, 1, calibration=calibration)
        self.fleet = Fleet(
            perf, SimConfig(), arrivals, prompts, outputs, initial_replicas=1, gpus_per_replica=1
        )
        self.exporter = SimMetricSource(self.fleet)

    def observe(self, now_s: float) -> Observation:
        self.fleet.run_until(now_s)
        return self.exporter.observe(now_s)

    # the Cluster protocol, for the live controller
    @property
    def spec_replicas(self) -> int:
        return len(self.fleet.replicas)

    def scale_to(self, n: int, now_s: float, *, drain_until_idle: bool = False) -> None:
        raise AssertionError("the drift tests never scale")

    def replicas_view(self) -> tuple[ReplicaView, ...]:
        return tuple(ReplicaView(r.name, Phase.READY, 0.0, 0.0) for r in self.fleet.replicas)


def _monitor(calibration: str | None = None, *, adapt: bool = False, registry: Any = None, **limits: float):
    settings = DriftSettings(
        adapt=adapt,
        limits=DriftLimits(**limits),
        adapt_config=AdaptConfig(time_constant_s=30.0),
    )
    return DriftMonitor(
        settings, model=MODEL, gpu=GPU, tp=1, calibration=calibration, budget_tokens=8192,
        target="llm/llama", registry=registry,
    )  # fmt: skip


def _drive(fleet: SimFleet, monitor: DriftMonitor, until_s: float, on_tick: Any = None) -> list[Any]:
    """Tick the monitor every TICK_S of simulated time; returns each tick's DriftTick."""
    window: tuple[Observation, ...] = ()
    ticks = []
    t = TICK_S
    while t <= until_s:
        window = (*window, fleet.observe(t))[-20:]
        signals = monitor.tick(t, window, compute_signals(window))
        ticks.append(monitor.last)
        if on_tick is not None:
            on_tick(t, signals, monitor)
        t += TICK_S
    return ticks


def _itl(tick: Any) -> float | None:
    r: float | None = tick.readings["itl"].ratio
    return r


def test_an_engine_with_slower_hbm_reads_as_itl_drift_and_warns_once(slow_hbm, caplog):
    caplog.set_level(logging.WARNING, logger="llmscale.controller.drift")
    ticks = _drive(SimFleet(slow_hbm), _monitor(), 300.0)
    ratios = [r for r in map(_itl, ticks) if r is not None]
    assert len(ratios) > 40  # a ratio at nearly every tick once the window has 2,000 tokens
    # the docstring's physics: at these batches (4-10) bandwidth 0.6 costs the step ~40%
    assert all(1.3 < r < 1.5 for r in ratios), ratios
    events = [t.events.get("itl") for t in ticks]
    assert events.count("drifting") == 1 and "back" not in events
    lines = [r.getMessage() for r in caplog.records if "inter-token latency" in r.getMessage()]
    assert (len(lines) == 1 and "is 1.4" in lines[0]) or "is 1.3" in lines[0], lines
    assert all(t.factors["bandwidth"] == 1.0 for t in ticks)  # adapt is off: nothing moves


def test_the_same_profile_reads_as_no_drift(slow_hbm):
    # the controller knows the engine: the comparison itself must not read drift (no bias from
    # prefills sharing steps, batch weighting or the context estimate)
    ticks = _drive(SimFleet(slow_hbm), _monitor(slow_hbm), 300.0)
    itl = [r for r in map(_itl, ticks) if r is not None]
    ttft = [t.readings["ttft"].ratio for t in ticks if t.readings["ttft"].ratio is not None]
    assert len(itl) > 40 and len(ttft) > 10
    assert all(0.95 < r < 1.05 for r in itl), itl
    assert all(0.85 < r < 1.15 for r in ttft), ttft
    assert not any(t.events for t in ticks)


def test_adaptation_moves_bandwidth_toward_the_engine_within_its_bounds(slow_hbm, caplog):
    caplog.set_level(logging.WARNING, logger="llmscale.controller.drift")
    monitor = _monitor(adapt=True)
    scales: list[FactorScale] = []
    ticks = _drive(SimFleet(slow_hbm), monitor, 400.0, lambda t, s, m: scales.append(m.state.scale))
    bw = [s.bandwidth for s in scales]
    # toward 0.6, never past the bound, at most 3% a tick
    assert bw[-1] < 0.8
    assert min(bw) >= 0.5
    steps = [abs(math.log(b / a)) for a, b in zip([1.0, *bw], bw, strict=False)]
    assert max(steps) <= math.log(1.03) + 1e-12
    # the decode-side host factor takes its share; comm is never touched
    assert scales[-1].host > 1.0 and scales[-1].comm == 1.0
    # the loop closes: the model now predicts the fleet's ITL, and says so once
    assert abs(_itl(ticks[-1]) - 1.0) < 0.05
    events = [t.events.get("itl") for t in ticks]
    assert events.count("drifting") == 1 and events.count("back") == 1
    assert events.index("drifting") < events.index("back")
    assert any("back within 10%" in r.getMessage() for r in caplog.records)
    assert ticks[-1].factors == pytest.approx(monitor.factors)


def test_no_adaptation_from_thin_windows(slow_hbm):
    monitor = _monitor(adapt=True, min_tokens=1e9, min_first_tokens=1e9)
    ticks = _drive(SimFleet(slow_hbm), monitor, 120.0)
    assert monitor.state.scale == FactorScale()
    assert all(_itl(t) is None and t.readings["ttft"].ratio is None for t in ticks)
    assert "thin window" in ticks[-1].readings["itl"].note
    assert ticks[-1].adapted == {"itl": "held: no ratio this tick", "ttft": "held: no ratio this tick"}
    # a thin ITL window alone holds the decode-side factors; TTFT windows still move compute
    monitor = _monitor(adapt=True, min_tokens=1e9)
    _drive(SimFleet(slow_hbm), monitor, 120.0)
    assert (monitor.state.scale.bandwidth, monitor.state.scale.host) == (1.0, 1.0)
    assert monitor.state.scale.compute < 1.0


# -- measure(): when a window says enough ----------------------------------------------------


def _window(**over: Any) -> DriftWindow:
    base: dict[str, Any] = {
        "span_s": 60.0, "replicas": 1, "itl_count": 5000.0, "itl_sum_s": 5000 * 0.012,
        "ttft_count": 100.0, "ttft_sum_s": 100 * 0.05, "batch": 8.0, "finished": 100.0,
        "queue_count": 100.0, "queue_sum_s": 100 * 0.006, "queue_seen": True,
        "prompt_tokens": 100_000.0, "generation_tokens": 20_000.0, "prefilled": 100.0,
        "prefill_prompt_tokens": 100_000.0, "prefill_rps_per_replica": 1.6, "waiting_max": 0.0,
    }  # fmt: skip
    base.update(over)
    return DriftWindow(**base)


NO_QUEUE_HIST = {"queue_count": 0.0, "queue_sum_s": 0.0, "queue_seen": False}


@pytest.mark.parametrize(
    ("over", "itl_note", "ttft_note"),
    [
        pytest.param({}, None, None, id="enough"),
        pytest.param({"itl_count": 1999.0}, "thin window: 1999 tokens", None, id="few-tokens"),
        pytest.param({"finished": 19.0}, "19 finished requests (min 20)", None, id="few-requests"),
        pytest.param(
            {"ttft_count": 49.0}, None, "thin window: 49 first tokens (min 50)", id="few-first-tokens"
        ),
        # queue time subtracted while requests waited less than a step (~12 ms here) on average
        pytest.param({"waiting_max": 3.0}, None, None, id="a-short-wait-is-taken-off"),
        pytest.param({"queue_sum_s": 100 * 0.05}, None, "queueing: requests waited 50.0 ms", id="queueing"),
        # without a queue-time histogram: only windows in which nothing was seen waiting
        pytest.param(NO_QUEUE_HIST, None, None, id="no-queue-histogram-nothing-waiting"),
        pytest.param(
            {**NO_QUEUE_HIST, "waiting_max": 3.0}, None, "waited in the window (up to 3)", id="waited"
        ),
        pytest.param(
            {**NO_QUEUE_HIST, "waiting_max": None}, None, "waited in the window (unknown)", id="unknown"
        ),
        pytest.param({"batch": None}, "no running gauge", "no running gauge", id="no-batch"),
        pytest.param({"itl_count": 0.0, "itl_sum_s": 0.0}, "no inter-token latency", None, id="no-itl"),
    ],
)
def test_measure_compares_only_windows_that_say_enough(over, itl_note, ttft_note):
    perf = get_perf_model(MODEL, GPU, 1)
    op, readings = measure(_window(**over), perf, DriftLimits(), 8192)
    for q, note in (("itl", itl_note), ("ttft", ttft_note)):
        r = readings[q]
        if note is None:
            assert r.ratio is not None and r.ratio > 0, r
        else:
            assert r.ratio is None and note in r.note, r
    if not over:
        # prompt 1,000 + half of 200 generated tokens per finished request
        assert op is not None and op.batch == 8.0 and op.context_tokens == pytest.approx(1100.0)
    if readings["ttft"].ratio is not None:
        # the engine's part: TTFT less the mean queue time, against the prefill steps alone
        queued = _window(**over).queue_mean_s or 0.0
        assert readings["ttft"].observed_s == pytest.approx(0.05 - queued)
        assert readings["ttft"].basis == ("prefill" if _window(**over).queue_seen else "wait+prefill")


# -- the policies plan with the adjusted factors ---------------------------------------------


def test_adjustable_policy_rebuilds_around_the_scale_and_keeps_its_state():
    ctx = Deployment(model=MODEL, gpu=GPU)
    built: list[FactorScale | None] = []

    def factory(scale: FactorScale | None) -> Any:
        built.append(scale)
        return create_policy("slo", Deployment(**{**ctx.__dict__, "perf_scale": scale}), {})

    p = AdjustablePolicy(factory)
    before = p.inner.capacity(1000.0, 200.0)
    p.rescale(FactorScale())  # all ones: nothing to rebuild
    assert built == [None]
    p.rescale(FactorScale(bandwidth=0.6))
    assert built == [None, FactorScale(bandwidth=0.6)] and p.name == "slo"
    after = p.inner.capacity(1000.0, 200.0)
    # slower HBM: fewer requests per second per replica within the same TPOT SLO
    assert after < 0.95 * before
    # the same capacity as a policy built on a profile with that factor
    assert after == pytest.approx(
        create_policy(
            "slo", Deployment(model=MODEL, gpu=GPU, perf_scale=FactorScale(bandwidth=0.6)), {}
        ).capacity(1000.0, 200.0)
    )
    assert p.guard_overrides == p.inner.guard_overrides and p.tick_s == 15.0


@pytest.mark.parametrize("policy", ["slo", "capacity-calibrated", "dynamo-sla"])
def test_every_capacity_model_policy_follows_the_scale(policy):
    ctx = Deployment(model=MODEL, gpu=GPU)
    slow = Deployment(model=MODEL, gpu=GPU, perf_scale=FactorScale(bandwidth=0.6))
    a, b = create_policy(policy, ctx, {}), create_policy(policy, slow, {})
    if policy == "slo":
        assert b.capacity(1000.0, 200.0) < a.capacity(1000.0, 200.0)
    elif policy == "capacity-calibrated":
        assert b.capacity(1000.0, 200.0).rate_rps < a.capacity(1000.0, 200.0).rate_rps
    else:
        pa, pb = a.perf, b.perf
        assert pb.decode(16, 1200).duration_s > 1.3 * pa.decode(16, 1200).duration_s


# -- in the live loop: signals, /metrics, decision log, saved state ---------------------------


class _Store:
    def __init__(self) -> None:
        self.doc: dict[str, Any] | None = None

    def load(self) -> dict[str, Any] | None:
        return self.doc

    def save(self, doc: dict[str, Any]) -> None:
        self.doc = json.loads(json.dumps(doc))


def _live(fleet: SimFleet, *, adapt: bool, mode: Mode, policy: str, store: Any = None, stream: Any = None):
    """A live controller over the simulated fleet with the drift hook, as ``build_runtime`` wires it."""
    metrics = ControllerMetrics("llm/llama", "scrape")
    ctx = Deployment(model=MODEL, gpu=GPU)
    params = {"replicas": 1} if policy == "static" else {}
    adjustable = AdjustablePolicy(
        lambda s: create_policy(policy, Deployment(**{**ctx.__dict__, "perf_scale": s}), params)
    )
    monitor = _monitor(adapt=adapt, registry=metrics.registry)
    monitor.policies = (adjustable,)
    clock = ManualClock()
    c = LiveController(
        source=fleet, cluster=fleet, primary=PolicyRun(adjustable, PLAIN, policy_version(policy, params, {})),
        mode=mode, target="llm/llama", metrics=metrics, tick_s=TICK_S, clock=clock, store=store,
        decision_log=DecisionLog("-", stream=stream) if stream is not None else None,
        timer=ManualClock(), drift=monitor,
    )  # fmt: skip
    return c, clock


def test_the_live_loop_exports_logs_and_hands_the_ratio_to_the_policy(slow_hbm):
    stream = io.StringIO()
    c, clock = _live(SimFleet(slow_hbm), adapt=False, mode=Mode.DRY_RUN, policy="slo", stream=stream)
    for k in range(1, 25):
        clock.advance_to(TICK_S * k)
        assert c.tick(TICK_S * k) is not None
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    last = lines[-1]["drift"]
    assert set(last) >= {"itl", "ttft", "factors", "adapt"}
    assert last["itl"]["ratio"] > 1.15 and last["itl"]["observed_s"] > last["itl"]["predicted_s"]
    assert last["factors"]["bandwidth"] == 1.0 and last["adapt"] is False
    reg = c.metrics.registry
    assert reg.get_sample_value("llmscale_model_drift_ratio", {"quantity": "itl"}) == pytest.approx(
        last["itl"]["ratio"], abs=1e-4
    )
    assert reg.get_sample_value("llmscale_model_factor", {"factor": "bandwidth"}) == 1.0
    assert reg.get_sample_value("llmscale_signal_value", {"signal": "model_drift_itl_ratio"}) is not None
    names = {m.name for m in reg.collect()}
    assert set(DRIFT_METRICS) <= names
    # the first tick has no ratio yet (no window), and no gauge then
    assert lines[0]["drift"]["itl"]["ratio"] is None


def test_the_adjustment_is_saved_and_restored_over_the_same_profile(slow_hbm, tmp_path):
    store = _Store()
    # static at the fleet's one replica: nothing is ever scaled, so only moving factors save
    c, _ = _live(SimFleet(slow_hbm), adapt=True, mode=Mode.APPLY, policy="static", store=store)
    for k in range(1, 40):
        c.tick(TICK_S * k)
    assert store.doc is not None and store.doc["last_decision"] is None
    saved = store.doc["drift"]
    assert saved["scale"]["bandwidth"] == pytest.approx(c.drift.state.scale.bandwidth, abs=0.011)
    assert saved["scale"]["bandwidth"] < 0.95
    # a restarted controller over the same profile plans with the saved factors at once
    again, _ = _live(SimFleet(slow_hbm), adapt=True, mode=Mode.APPLY, policy="static", store=store)
    again.start()
    assert again.drift.state.scale.bandwidth == pytest.approx(saved["scale"]["bandwidth"])
    assert again.primary.policy.scale is not None
    # ... and refuses them over another starting point (the profile changed), or out of bounds
    other = _monitor(_profile(tmp_path / "other.yaml", 0.8), adapt=True)
    assert "profile changed" in other.restore(saved)
    out_of_bounds = {"start": saved["start"], "scale": {**saved["scale"], "host": 7.0}}
    assert "outside" in _monitor(adapt=True).restore(out_of_bounds)
    # a dry-run controller touches nothing, not even to save its factors
    dry = _Store()
    d, _ = _live(SimFleet(slow_hbm), adapt=True, mode=Mode.DRY_RUN, policy="static", store=dry)
    for k in range(1, 40):
        d.tick(TICK_S * k)
    assert d.drift.state.scale.bandwidth < 0.95 and dry.doc is None


# -- configuration and wiring ----------------------------------------------------------------

CFG = {
    "target": {"name": "llama", "model": MODEL, "gpu": GPU},
    "metrics": {"source": "scrape", "scrape": {"emulate_url": "http://127.0.0.1:1"}},
    "policy": {"name": "slo"},
    "actuator": {"kind": "emulate", "emulate": {"url": "http://127.0.0.1:1"}},
}


def test_drift_defaults_monitor_without_adapting():
    cfg = parse_config(CFG)
    assert cfg.drift.enabled and not cfg.drift.adapt and cfg.drift.warn == 0.15
    metrics = ControllerMetrics("default/llama", "scrape")
    monitor, runs = build_drift(cfg, [policy_run(cfg, cfg.policy)], metrics.registry)
    assert monitor is not None and not isinstance(runs[0].policy, AdjustablePolicy)


def test_drift_adapt_makes_the_policies_rebuildable():
    doc = {**CFG, "drift": {"adapt": True, "time_constant_s": 120, "max_step": 0.05}}
    cfg = parse_config({**doc, "shadow": {"name": "capacity-calibrated"}})
    assert cfg.shadow is not None
    monitor, runs = build_drift(cfg, [policy_run(cfg, cfg.policy), policy_run(cfg, cfg.shadow)], None)
    # the primary and the shadow plan with the same engine: both are rebuilt around the factors
    assert [r.policy.name for r in runs] == ["slo", "capacity-calibrated"]
    assert all(isinstance(r.policy, AdjustablePolicy) for r in runs)
    assert monitor.policies == tuple(r.policy for r in runs)
    assert monitor.settings.adapt_config.time_constant_s == 120.0
    assert build_drift(parse_config({**CFG, "drift": {"enabled": False}}), [], None) == (None, [])


@pytest.mark.parametrize(
    ("section", "message"),
    [
        pytest.param({"warn": 0}, "drift.warn: Input should be greater than 0", id="warn"),
        pytest.param({"max_step": 0.9}, "drift.max_step: Input should be less than or equal", id="step"),
        pytest.param({"time_constant_s": -1}, "drift.time_constant_s:", id="tau"),
        pytest.param({"min_tokens": 0}, "drift.min_tokens:", id="tokens"),
        pytest.param({"adpat": True}, "drift.adpat: Extra inputs are not permitted", id="typo"),
    ],
)
def test_bad_drift_fields_are_named(section, message):
    from llmscale.errors import ConfigError

    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_config({**CFG, "drift": section})
