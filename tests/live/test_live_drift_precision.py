"""The model-drift hook judges an FP8 fleet against the FP8 step-time model (docs/fp8.md).

A simulated one-replica fleet serving FP8 weights + KV (Llama-3-8B / H100, no calibration
profile), observed under vLLM's names. Told the formats, the monitor reads no drift; told nothing
(bf16), it reads the faster FP8 decode as the engine running ahead of the model, and
``drift.adapt`` would move the bandwidth factor to cover the formats it was not told.
Deterministic: seeded arrivals, explicit simulated times.
"""

from __future__ import annotations

import numpy as np

from llmscale.config import parse_config
from llmscale.controller.drift import DriftMonitor, DriftSettings
from llmscale.perf import get_perf_model, precision_of
from llmscale.perf.drift import AdaptConfig, DriftLimits
from llmscale.perf.profile import FactorScale
from llmscale.signals.fleet import compute_signals
from llmscale.sim.config import SimConfig
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.types import Observation
from llmscale.wiring import build_drift, policy_run

MODEL, GPU = "llama-3-8b", "h100-80gb"
FP8 = precision_of(quantization="fp8", kv_cache_dtype="fp8")
TICK_S = 5.0


def _itl_ratios(monitor: DriftMonitor, until_s: float = 200.0) -> list[float]:
    # 3 req/s of ~1,000 + ~200 tokens on one FP8 replica (the drift tests' load)
    rng = np.random.default_rng(7)
    n = int(until_s * 3.0)
    arrivals = np.cumsum(rng.exponential(1.0 / 3.0, n))
    prompts = rng.integers(600, 1400, n).astype(np.int64)
    outputs = rng.integers(100, 300, n).astype(np.int64)
    perf = get_perf_model(MODEL, GPU, 1, precision=FP8)
    fleet = Fleet(perf, SimConfig(), arrivals, prompts, outputs, initial_replicas=1, gpus_per_replica=1)
    source = SimMetricSource(fleet)
    window: tuple[Observation, ...] = ()
    ratios = []
    t = TICK_S
    while t <= until_s:
        fleet.run_until(t)
        window = (*window, source.observe(t))[-20:]
        monitor.tick(t, window, compute_signals(window))
        assert monitor.last is not None
        r = monitor.last.readings["itl"].ratio
        if r is not None:
            ratios.append(r)
        t += TICK_S
    return ratios


def _monitor(precision=None) -> DriftMonitor:
    settings = DriftSettings(limits=DriftLimits(), adapt_config=AdaptConfig(time_constant_s=30.0))
    return DriftMonitor(
        settings, model=MODEL, gpu=GPU, tp=1, calibration=None, budget_tokens=8192,
        target="llm/llama", precision=precision,
    )  # fmt: skip


def test_told_the_formats_the_monitor_reads_no_drift_on_an_fp8_fleet():
    told = _itl_ratios(_monitor(FP8))
    assert len(told) > 20
    assert all(0.95 < r < 1.05 for r in told), told
    assert _monitor(FP8).model_for(FactorScale()).precision == FP8


def test_judged_as_bf16_the_fp8_decode_reads_as_drift():
    blind = _itl_ratios(_monitor())
    # at these batches an FP8 decode step is ~0.7-0.8 of the bf16 one (docs/fp8.md: 5.5 vs 7.9 ms
    # at batch 1): far past the 15% warning band, for a fleet running exactly as modelled
    assert len(blind) > 20 and max(blind) < 0.85, blind


def test_run_wires_the_targets_formats_into_the_monitor():
    cfg = parse_config(
        {
            "target": {
                "name": "llama",
                "model": MODEL,
                "gpu": GPU,
                "quantization": "fp8",
                "kv_cache_dtype": "fp8",
            },
            "metrics": {"source": "scrape", "scrape": {"emulate_url": "http://127.0.0.1:1"}},
            "policy": {"name": "slo"},
            "actuator": {"kind": "emulate", "emulate": {"url": "http://127.0.0.1:1"}},
        }
    )
    monitor, _ = build_drift(cfg, [policy_run(cfg, cfg.policy)], None)
    assert monitor is not None and monitor.model_for(FactorScale()).precision == FP8
