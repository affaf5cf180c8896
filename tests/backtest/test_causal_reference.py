"""The causal reference (``backtest/causal_reference.py``): the cheapest schedule found without foresight.

Its claims, each checked on real backtests (the default policy roster, the oracle and the
reference on one workload): it never costs less than the oracle (the oracle sees the future), and
no policy of the roster reaches min(99%, the reference's attainment) with fewer GPU-hours (else it
is not the cheapest causal schedule). Workloads: a window of the Azure conversation trace from
``../shared/data`` and the default preset's flash crowd.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from llmscale.backtest.causal_reference import REFERENCE, ReferenceSettings, delayed_schedule
from llmscale.backtest.compare import build_document, run_backtest
from llmscale.backtest.oracle_schedule import Grid
from llmscale.backtest.runner import BacktestSettings
from llmscale.errors import ConfigError
from llmscale.policies.base import DEFAULT_POLICIES
from llmscale.report import comparison_table
from llmscale.workloads import load_trace, make_preset, rate_scale, window
from llmscale.workloads.model import Workload

DATA = Path(os.environ.get("LLMSCALE_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
AZURE = DATA / "traces" / "azure_llm_2023_conv.csv"


def test_delayed_schedule_worked_example() -> None:
    # The docstring's: oracle [4, 6, 5] at 60 s, detection 15 s, start 108 s, 6 s steps, headroom
    # 0.25: the fall is learnt (135 s) before the rise serves (183 s), so 6 x 1.25 never does.
    grid = Grid(6.0, 60)
    s = delayed_schedule([4, 6, 5], 60.0, 15.0, 108.0, grid, 0.25, 1, 64)
    assert len(s) == grid.num_intervals + 1
    times = {k * 6.0: n for k, n in enumerate(s)}
    assert {times[t] for t in (0.0, 72.0, 138.0, 180.0)} == {5}
    assert {times[t] for t in (186.0, 240.0, 360.0)} == {7}
    # A rise that lasts is served one start after it is learnt: [4, 6, 6, 6] -> 6 from 183 s on.
    s = delayed_schedule([4, 6, 6, 6], 60.0, 15.0, 108.0, grid, 0.0, 1, 64)
    assert (s[30], s[31]) == (4, 6)
    # clipped to the bounds
    assert max(delayed_schedule([4, 6, 5], 60.0, 15.0, 108.0, grid, 2.0, 1, 10)) == 10


def test_settings_validated_at_the_edge() -> None:
    with pytest.raises(ConfigError, match="step_s"):
        ReferenceSettings(step_s=0.0)
    with pytest.raises(ConfigError, match="detection_s"):
        ReferenceSettings(detection_s=-1.0)


def _check(w: Workload, settings: BacktestSettings) -> dict:  # type: ignore[type-arg]
    results, oracle, _ = run_backtest(
        w, list(DEFAULT_POLICIES), settings, include_oracle=True, jobs=2, reference=ReferenceSettings()
    )
    assert oracle is not None and oracle.causal_reference is not None
    doc = build_document(w, settings, results, oracle, with_series=False)
    ref, orc = doc["causal_reference"], doc["oracle"]
    assert ref["policy"] == REFERENCE
    # the same fields as the oracle's row (plus the reference's own search record)
    assert set(orc) - {"oracle_interval_s", "oracle_target", "oracle_trials", "oracle_search"} <= set(ref)
    assert doc["price_of_foresight"] == pytest.approx(ref["gpu_hours"] / orc["gpu_hours"], rel=1e-3)
    # The oracle sees the future: the reference, run on the same simulator, costs at least as much.
    assert ref["gpu_hours"] >= orc["gpu_hours"]
    need = min(0.99, float(ref["slo_attainment"]))
    cheaper = [
        (r.policy, r.summary["slo_attainment"], r.summary["gpu_hours"])
        for r in results
        if r.summary["slo_attainment"] >= need and r.summary["gpu_hours"] < ref["gpu_hours"]
    ]
    assert not cheaper, f"reference {ref['slo_attainment']:.4f} at {ref['gpu_hours']:.4f} GPU-h: {cheaper}"
    # The table shows it under the oracle, with the price of foresight in its caption.
    console = Console(width=240, record=True)
    console.print(comparison_table(doc))
    text = " ".join(console.export_text().split())  # the caption wraps
    assert "causal reference" in text
    assert f"{doc['price_of_foresight']:.2f}x the oracle's GPU-hours, the price of foresight" in text
    return doc


@pytest.mark.shared_data
@pytest.mark.slow
def test_reference_undominated_on_a_shared_trace() -> None:
    if not AZURE.is_file():
        pytest.skip(f"needs the Azure conversation trace at {AZURE} (../shared/data)")
    # 15 minutes of the Azure conversation trace at x6 (~33 req/s, 3-4 replicas of Llama-3-8B).
    w = rate_scale(window(load_trace(AZURE, "azure"), 600.0, 900.0), 6.0, seed=0)
    settings = replace(
        BacktestSettings(min_replicas=1, max_replicas=16, initial_replicas=3).with_cold_start(),
        policy_params={"static": {"replicas": 4}},
    )
    doc = _check(w, settings)
    assert doc["causal_reference"]["slo_attainment"] >= min(0.99, doc["oracle"]["slo_attainment"]) - 0.01


@pytest.mark.slow
def test_reference_undominated_on_the_default_preset_flash_crowd() -> None:
    # The default preset's x3 flash crowd (minute 40) and the ramp down after it: 20 minutes.
    w = window(make_preset("default", seed=0), 1800.0, 1200.0)
    settings = replace(
        BacktestSettings(min_replicas=1, max_replicas=40, initial_replicas=6).with_cold_start(),
        policy_params={"static": {"replicas": 16}},
    )
    _check(w, settings)
