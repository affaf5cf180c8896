"""Small tuning cases: a few minutes of a preset at a low rate, so a trial takes about a second."""

from __future__ import annotations

from llmscale.backtest.runner import BacktestSettings
from llmscale.tune.objective import TuneCase
from llmscale.workloads import make_preset, window
from llmscale.workloads import rate_scale as scale


def small_case(preset: str = "flash-crowd", *, start_s: float = 0.0, duration_s: float = 900.0) -> TuneCase:
    """``preset``'s window at 1/10 of its rate (~6 req/s): one to three H100 replicas of Llama-3-8B."""
    w = scale(window(make_preset(preset, seed=0), start_s, duration_s), 0.1, seed=0)
    settings = BacktestSettings(min_replicas=1, max_replicas=12, initial_replicas=2).with_cold_start()
    return TuneCase(f"{preset} {start_s:.0f}+{duration_s:.0f}s", w, settings)
