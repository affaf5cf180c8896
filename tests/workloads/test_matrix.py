"""The policy benchmark's workload matrix (workloads/matrix.py): each load shape is the rate curve it says."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmscale.errors import ConfigError
from llmscale.workloads.matrix import MatrixCell, cell_workload

# The synthetic mixes (code, reasoning) need no trace; the shared-trace ones are the benchmark's.
NO_DATA = Path("/nonexistent")


def rate_in(w, start_s: float, end_s: float) -> float:
    return float(np.count_nonzero((w.arrival_s >= start_s) & (w.arrival_s < end_s))) / (end_s - start_s)


def test_step_doubles_the_rate_a_third_of_the_way_in():
    w = cell_workload(MatrixCell("code", "step"), 20.0, NO_DATA, duration_s=1200.0)
    before, after = rate_in(w, 0.0, 400.0), rate_in(w, 400.0, 1200.0)
    assert before == pytest.approx(10.0, rel=0.08) and after == pytest.approx(20.0, rel=0.06)


def test_flash_crowd_doubles_the_rate_for_three_minutes():
    w = cell_workload(MatrixCell("code", "flash"), 20.0, NO_DATA, duration_s=1200.0)
    assert rate_in(w, 0.0, 600.0) == pytest.approx(10.0, rel=0.08)
    assert rate_in(w, 600.0, 780.0) == pytest.approx(20.0, rel=0.1)
    assert rate_in(w, 780.0, 1200.0) == pytest.approx(10.0, rel=0.08)


def test_ramp_rises_from_forty_percent_to_the_peak():
    w = cell_workload(MatrixCell("reasoning", "ramp"), 20.0, NO_DATA, duration_s=1200.0)
    assert rate_in(w, 0.0, 120.0) == pytest.approx(8.0 + 0.6, rel=0.15)  # ~40% near the start
    assert rate_in(w, 1080.0, 1200.0) == pytest.approx(20.0, rel=0.1)


@pytest.mark.parametrize(
    ("mix", "prompt_mean", "output_mean"),
    [pytest.param("code", 2000.0, 30.0, id="code"), pytest.param("reasoning", 600.0, 2000.0, id="reasoning")],
)
def test_mix_lengths(mix, prompt_mean, output_mean):
    w = cell_workload(MatrixCell(mix, "step"), 20.0, NO_DATA, duration_s=1200.0)
    assert float(w.input_tokens.mean()) == pytest.approx(prompt_mean, rel=0.1)
    assert float(w.output_tokens.mean()) == pytest.approx(output_mean, rel=0.1)


def test_unknown_names_are_refused():
    with pytest.raises(ConfigError, match="request mix"):
        cell_workload(MatrixCell("poetry", "step"), 20.0, NO_DATA)
    with pytest.raises(ConfigError, match="load shape"):
        cell_workload(MatrixCell("code", "zigzag"), 20.0, NO_DATA)


def test_long_output_cell_has_long_answers():
    w = cell_workload(MatrixCell("long-output", "ramp"), 5.0, NO_DATA, duration_s=1200.0)
    assert float(w.output_tokens.mean()) == pytest.approx(1500.0, rel=0.1)
    assert float(w.input_tokens.mean()) == pytest.approx(300.0, rel=0.1)


@pytest.mark.shared_data
def test_burst_cell_repeats_the_azure_seconds():
    import os

    data = Path(
        os.environ.get("LLMSCALE_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")
    )
    data = data / "traces"
    if not (data / "azure_llm_2023_conv.csv").is_file():
        pytest.skip(f"needs the Azure trace in {data} (../shared/data)")
    w = cell_workload(MatrixCell("chat", "burst"), 55.0, data, duration_s=1200.0)
    per_second = np.bincount(np.floor(w.arrival_s).astype(np.int64))
    # ~10 x the trace's 5.5 req/s, each busy second of it ~10 x as busy (burst mode)
    assert w.num_requests / w.duration_s == pytest.approx(55.0, rel=0.05)
    assert w.meta["transforms"][-1]["op"] == "rate_scale" and "mode" not in w.meta["transforms"][-1]
    assert per_second.var() / per_second.mean() > 5.0
