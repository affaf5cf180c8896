"""Statistics over seeds: the t intervals, paired comparisons, and real repeated backtests."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.backtest.compare import run_backtest, run_backtest_seeds
from llmscale.backtest.results import PolicyResult
from llmscale.backtest.runner import BacktestSettings
from llmscale.backtest.seeds import (
    add_seed_statistics,
    compare_pairs,
    interval,
    paired_difference,
    seed_block,
)
from llmscale.sim.config import SimConfig
from llmscale.workloads import Workload, flash_crowd

SEEDS = (11, 12, 13)


@pytest.mark.parametrize(
    ("values", "mean", "half_width"),
    [
        # The module docstring's example: sd 0.01, t(0.975, 2) = 4.3027, 4.3027 * 0.01 / sqrt(3).
        pytest.param([0.90, 0.91, 0.92], 0.91, 0.024841, id="three"),
        # Two values: t(0.975, 1) = 12.706, sd = 0.7071, 12.706 * 0.7071 / sqrt(2) = 6.353.
        pytest.param([1.0, 2.0], 1.5, 6.353102, id="two"),
        pytest.param([5.0], 5.0, 0.0, id="one: no spread"),
        pytest.param([2.0, 2.0, 2.0, 2.0], 2.0, 0.0, id="identical"),
    ],
)
def test_interval_table(values: list[float], mean: float, half_width: float) -> None:
    iv = interval(values)
    assert iv.mean == pytest.approx(mean)
    assert iv.half_width == pytest.approx(half_width, abs=1e-6)
    assert iv.low == pytest.approx(mean - half_width, abs=1e-6)


@pytest.mark.parametrize(
    ("a", "b", "within"),
    [
        pytest.param([0.9, 0.8, 0.95], [0.9, 0.8, 0.95], True, id="same values"),
        pytest.param([1.0, 1.2, 0.9], [2.0, 2.4, 1.8], False, id="twice, every seed"),
        # A constant offset with no spread is a real difference, however small.
        pytest.param([1.0, 1.2, 0.9], [1.001, 1.201, 0.901], False, id="constant offset"),
        # Differences +0.02, -0.01, +0.01: mean 0.0067, interval ±0.038, holds 0.
        pytest.param([0.92, 0.90, 0.94], [0.90, 0.91, 0.93], True, id="noisy"),
    ],
)
def test_paired_difference_table(a: list[float], b: list[float], within: bool) -> None:
    _, noise = paired_difference(a, b)
    assert noise is within


@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=30), st.floats(-1e3, 1e3))
def test_interval_is_shift_equivariant_and_symmetric(values: list[float], shift: float) -> None:
    iv = interval(values)
    moved = interval([v + shift for v in values])
    assert moved.mean == pytest.approx(iv.mean + shift, abs=1e-6)
    assert moved.half_width == pytest.approx(iv.half_width, rel=1e-6, abs=1e-6)
    assert iv.mean - iv.low == pytest.approx(iv.high - iv.mean, abs=1e-6)


def test_interval_rejects_nothing_and_nan() -> None:
    with pytest.raises(ValueError, match="no values"):
        interval([])
    with pytest.raises(ValueError, match="non-finite"):
        interval([1.0, math.nan])


def test_attainment_interval_is_clipped_to_one() -> None:
    block = seed_block([0, 1, 2], [{"slo_attainment": v, "gpu_hours": 1.0} for v in (0.9992, 0.9998, 1.0)])
    assert block["slo_attainment"]["ci95"][1] == 1.0
    assert block["slo_attainment"]["half_width"] > 0.0009  # the t half-width itself, unclipped


def _workload(seed: int) -> Workload:
    return flash_crowd(8.0, 240.0, spike_start_s=80.0, spike_duration_s=40.0, multiplier=4.0, seed=seed)


def _settings(seed: int, static_replicas: int) -> BacktestSettings:
    return BacktestSettings(
        min_replicas=1,
        max_replicas=6,
        initial_replicas=2,
        seed=seed,
        sim=SimConfig(pending_s=20.0, loading_s=10.0, warmup_s=5.0, grace_s=10.0, timeout_s=30.0, seed=seed),
        policy_params={"static": {"replicas": static_replicas}},
    )


def _rows(
    runs: list[tuple[list[PolicyResult], PolicyResult | None, list[str]]], name: str
) -> dict[str, object]:
    """The row of the run's only policy under ``name``, with its statistics over SEEDS."""
    return {"policy": name, "seeds": seed_block(SEEDS, [run[0][0].summary for run in runs])}


@pytest.fixture(scope="module")
def workloads() -> list[Workload]:
    return [_workload(s) for s in SEEDS]


def _run(workloads: list[Workload], policy: str, static_replicas: int, jobs: int = 1):  # type: ignore[no-untyped-def]
    settings = [_settings(s, static_replicas) for s in SEEDS]
    return run_backtest_seeds(workloads, [policy], settings, include_oracle=False, jobs=jobs)


def test_a_policy_against_itself_is_within_noise(workloads: list[Workload]) -> None:
    # Two separate runs of the same policy on the same seeds, under two names: paired, they
    # differ by exactly 0 on every seed. Misaligned seeds or a run that is not reproducible
    # would show as a difference.
    first = _rows(_run(workloads, "hpa-gpu-util", 2), "hpa")
    again = _rows(_run(workloads, "hpa-gpu-util", 2, jobs=2), "hpa-again")
    seeds_vary = first["seeds"]["slo_attainment"]["values"]  # type: ignore[index]
    assert len(set(seeds_vary)) > 1, "the seeds must give different runs, or the test shows nothing"
    for c in compare_pairs([first, again]):
        assert c["within_noise"], c
        assert c["mean_difference"] == 0.0


def test_twice_the_replicas_is_not_within_noise(workloads: list[Workload]) -> None:
    two = _rows(_run(workloads, "static", 2), "static-2")
    four = _rows(_run(workloads, "static", 4), "static-4")
    gpu = {c["metric"]: c for c in compare_pairs([two, four])}["gpu_hours"]
    assert not gpu["within_noise"]
    # Half the replicas for the whole run: about half the GPU-hours on every seed (the run's
    # length moves with the seed's last request, so "about": within 10%).
    assert gpu["ci95"][1] < 0
    four_mean = four["seeds"]["gpu_hours"]["mean"]  # type: ignore[index]
    assert gpu["mean_difference"] == pytest.approx(-four_mean / 2, rel=0.10)


def test_seed_runs_match_single_runs(workloads: list[Workload]) -> None:
    """Every (policy, seed) job of the shared pool gives what run_backtest gives for that seed alone."""
    settings = [_settings(s, 3) for s in SEEDS]
    runs = run_backtest_seeds(workloads, ["static", "hpa-gpu-util"], settings, include_oracle=False, jobs=2)
    for k, (w, s) in enumerate(zip(workloads, settings, strict=True)):
        alone, _, _ = run_backtest(w, ["static", "hpa-gpu-util"], s, include_oracle=False, jobs=1)
        for got, want in zip(runs[k][0], alone, strict=True):
            assert {**got.summary, "wall_s": 0} == {**want.summary, "wall_s": 0}
    doc = {"results": [r.as_json() for r in runs[0][0]], "oracle": None}
    add_seed_statistics(doc, list(SEEDS), runs)
    assert [r["seeds"]["seeds"] for r in doc["results"]] == [list(SEEDS)] * 2
    assert len(doc["seeds"]["comparisons"]) == 2


def test_settings_per_workload_are_required(workloads: list[Workload]) -> None:
    with pytest.raises(ValueError, match="one settings per workload"):
        run_backtest_seeds(workloads, ["static"], [replace(_settings(0, 2))], include_oracle=False)
