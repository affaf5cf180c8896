"""Every supported format that has a real file in ../shared/data, checked against published facts.

Skipped (with the reason) when ../shared/data is not beside the repository.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from llmscale.errors import ConfigError
from llmscale.workloads import LengthSampler, Workload, detect_format, load_trace, rate_scale

pytestmark = pytest.mark.shared_data

AZURE = "traces/azure_llm_2023_conv.csv"
MOONCAKE = "traces/mooncake_synthetic_trace.jsonl"
SERVEGEN_RAW = "traces/servegen/raw_m-small"
M_LARGE_TOTAL = "traces/servegen/language_m-large_total_rate_10min.csv"
M_SMALL_TOTAL = "traces/servegen/language_m-small_total_rate_10min.csv"


@pytest.fixture(scope="module")
def azure(shared_data: Path) -> Workload:
    return load_trace(shared_data / AZURE)


@pytest.mark.parametrize(
    ("rel", "fmt"),
    [
        pytest.param(AZURE, "azure", id="azure"),
        pytest.param(MOONCAKE, "mooncake", id="mooncake"),
        pytest.param(SERVEGEN_RAW, "servegen", id="servegen-raw-dir"),
        pytest.param(SERVEGEN_RAW + "/chunk-0-trace.csv", "servegen", id="servegen-chunk"),
        pytest.param(M_LARGE_TOTAL, "servegen", id="servegen-total"),
    ],
)
def test_detects_real_formats(shared_data: Path, rel: str, fmt: str) -> None:
    assert detect_format(shared_data / rel) == fmt


def test_azure_published_facts(azure: Workload) -> None:
    s = azure.summary()
    assert s["requests"] == 19_366
    assert s["mean_rps"] == pytest.approx(5.5, abs=0.05)
    assert s["peak_1min_rps"] == pytest.approx(8.5, abs=0.06)
    assert s["input_mean_tokens"] == pytest.approx(1155, abs=1)
    assert s["input_p99_tokens"] == pytest.approx(4142, abs=1)
    assert s["output_mean_tokens"] == pytest.approx(211, abs=1)
    assert s["output_p99_tokens"] == pytest.approx(601, abs=1)
    assert azure.duration_s == pytest.approx(58 * 60, abs=60)
    assert azure.meta["clamped_rows"] == 0
    assert azure.meta["sorted"] is False
    assert azure.meta["start_timestamp"] == "2023-11-16 18:15:46.6805900"
    gaps = np.diff(azure.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(1.1, abs=0.05)


def test_azure_loads_fast(shared_data: Path) -> None:
    start = time.perf_counter()
    load_trace(shared_data / AZURE)
    assert time.perf_counter() - start < 1.0  # measured ~0.015 s


def test_azure_rate_scale_20(azure: Workload) -> None:
    start = time.perf_counter()
    scaled = rate_scale(azure, 20.0, seed=0)
    elapsed_s = time.perf_counter() - start
    assert elapsed_s < 1.0  # measured ~0.04 s
    assert scaled.num_requests == 20 * 19_366
    assert scaled.duration_s == azure.duration_s
    # Shape kept: peak/mean per minute stays at Azure's 8.45 / 5.53 = 1.53.
    assert scaled.peak_rate_rps() / scaled.mean_rate_rps == pytest.approx(1.53, abs=0.04)


def test_mooncake_facts(shared_data: Path) -> None:
    w = load_trace(shared_data / MOONCAKE)
    assert w.num_requests == 3_993
    assert w.mean_rate_rps == pytest.approx(3.9, abs=0.05)
    assert w.duration_s == pytest.approx(1022.025)
    assert w.input_tokens.mean() == pytest.approx(15_000, rel=0.05)
    assert w.meta["prefix_reuse_share"] == pytest.approx(0.64, abs=0.01)


def _total_rate_mean(path: Path, windows: int) -> float:
    rows = path.read_text().splitlines()[1 : windows + 1]
    return float(np.mean([float(r.split(",")[1]) for r in rows]))


def test_servegen_raw_dir_first_hour_matches_its_total_rate_file(shared_data: Path) -> None:
    w = load_trace(shared_data / SERVEGEN_RAW, duration_s=3600, seed=0)
    assert w.meta["clients"] == 43
    assert w.meta["poisson_fallback_windows"] == 0
    total_rps = _total_rate_mean(shared_data / M_SMALL_TOTAL, 6)
    assert w.meta["expected_requests"] == pytest.approx(total_rps * 3600, rel=0.001)
    assert w.num_requests / 3600 == pytest.approx(total_rps, rel=0.02)
    # m-small lengths: 120 in / 15 out.
    assert w.input_tokens.mean() == pytest.approx(120, rel=0.03)


def test_servegen_span_from_the_middle(shared_data: Path) -> None:
    # Day 3, 12:00-12:30: only that half hour is generated.
    start_s = 2 * 86_400 + 12 * 3600
    w = load_trace(shared_data / SERVEGEN_RAW, start_s=start_s, duration_s=1800, seed=1)
    assert w.meta["start_s"] == start_s
    assert w.duration_s == pytest.approx(1800, abs=1)


def test_servegen_whole_file_is_refused_without_a_span(shared_data: Path) -> None:
    with pytest.raises(ConfigError, match="max_requests"):
        load_trace(shared_data / SERVEGEN_RAW)


def test_servegen_total_rate_m_large(shared_data: Path) -> None:
    path = shared_data / M_LARGE_TOTAL
    w = load_trace(path, duration_s=3600, seed=0)
    assert w.num_requests / 3600 == pytest.approx(_total_rate_mean(path, 6), rel=0.01)
    assert w.input_tokens.mean() == pytest.approx(914, rel=0.03)
    assert w.output_tokens.mean() == pytest.approx(155, rel=0.03)


@pytest.mark.parametrize(
    ("name", "pairs", "input_mean", "output_mean"),
    [
        pytest.param("sharegpt_lengths_llama2_tokenizer.csv", 30_731, 2340.0, 438.7, id="sharegpt"),
        pytest.param("arxiv_summarization_lengths_llama2_tokenizer.csv", 28_257, 2588.1, 291.4, id="arxiv"),
    ],
)
def test_length_files(
    shared_data: Path, name: str, pairs: int, input_mean: float, output_mean: float
) -> None:
    sampler = LengthSampler.from_file(shared_data / "calibration" / "lengths" / name)
    d = sampler.describe()
    assert d["pairs"] == pairs
    assert d["input_mean_tokens"] == pytest.approx(input_mean, abs=0.1)
    assert d["output_mean_tokens"] == pytest.approx(output_mean, abs=0.1)
    inp, _ = sampler.sample(100_000, 0)
    assert inp.mean() == pytest.approx(input_mean, rel=0.03)
