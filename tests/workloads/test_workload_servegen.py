"""ServeGen loader on small fixtures: generated counts, spans, seeds, lengths and errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from workload_fixtures import CHUNK_0_TEXT, CHUNK_1_TEXT, TOTAL_RATE_TEXT

from llmscale.errors import ConfigError, TraceFormatError
from llmscale.workloads import LengthSampler, load_trace

Write = Callable[[str, str], Path]


def test_client_dir_count_matches_rates(servegen_dir: Path) -> None:
    w = load_trace(servegen_dir, seed=1)
    assert w.meta["format"] == "servegen"
    assert w.meta["layout"] == "clients"
    assert w.meta["clients"] == 2
    assert w.meta["expected_requests"] == pytest.approx(13_800)
    assert w.meta["active_windows"] == 7
    # Bursty renewal counts: allow 8% around the 13,800 expectation (seeded, so stable).
    assert w.num_requests == pytest.approx(13_800, rel=0.08)
    assert np.all(np.diff(w.arrival_s) >= 0)
    assert w.arrival_s[-1] < 3600


def test_idle_windows_stay_idle(servegen_dir: Path) -> None:
    w = load_trace(servegen_dir, seed=2)
    t = w.arrival_s + float(w.meta["t0_offset_s"])  # type: ignore[arg-type]
    # 2400-3000 is idle for both clients.
    assert not np.any((t >= 2400) & (t < 3000))


def test_rate_is_matched_per_window(servegen_dir: Path) -> None:
    w = load_trace(servegen_dir, seed=3)
    t = w.arrival_s + float(w.meta["t0_offset_s"])  # type: ignore[arg-type]
    counts = np.bincount((t // 600).astype(int), minlength=6)
    expected = np.array([5 + 2, 5, 2, 2 + 2, 0, 5]) * 600
    np.testing.assert_allclose(counts, expected, rtol=0.25)


def test_same_seed_same_workload_other_seed_differs(servegen_dir: Path) -> None:
    a = load_trace(servegen_dir, seed=7)
    b = load_trace(servegen_dir, seed=7)
    c = load_trace(servegen_dir, seed=8)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.input_tokens, b.input_tokens)
    assert a.num_requests != c.num_requests or not np.array_equal(a.arrival_s, c.arrival_s)


def test_span_generates_only_that_span_and_agrees_with_full_load(servegen_dir: Path) -> None:
    full = load_trace(servegen_dir, seed=4)
    part = load_trace(servegen_dir, seed=4, start_s=900, duration_s=1200)
    assert part.meta["start_s"] == 900
    assert part.meta["duration_s"] == 1200
    # Expected: 300 s of window 600 (5 req/s) + window 1200 (2 req/s) + 300 s of window 1800 (4 req/s).
    assert part.meta["expected_requests"] == pytest.approx(300 * 5 + 600 * 2 + 300 * 4)
    t_full = full.arrival_s + float(full.meta["t0_offset_s"])  # type: ignore[arg-type]
    t_part = part.arrival_s + float(part.meta["t0_offset_s"])  # type: ignore[arg-type]
    in_span = (t_full >= 900) & (t_full < 2100)
    np.testing.assert_allclose(t_part, t_full[in_span])
    np.testing.assert_array_equal(part.output_tokens, full.output_tokens[in_span])


def test_single_chunk_file(write: Write) -> None:
    w = load_trace(write("chunk-0-trace.csv", CHUNK_0_TEXT), seed=0)
    assert w.meta["clients"] == 1
    assert w.num_requests == pytest.approx(10_200, rel=0.08)


def test_default_lengths_follow_the_model_family(write: Write, servegen_dir: Path) -> None:
    large = load_trace(servegen_dir, seed=0)
    assert large.input_tokens.mean() == pytest.approx(914, rel=0.05)
    assert large.output_tokens.mean() == pytest.approx(155, rel=0.05)
    small = load_trace(write("raw_m-small/chunk-0-trace.csv", CHUNK_0_TEXT), seed=0)
    assert small.input_tokens.mean() == pytest.approx(120, rel=0.05)
    assert small.output_tokens.mean() == pytest.approx(15, rel=0.08)


def test_length_overrides(servegen_dir: Path, write: Write) -> None:
    w = load_trace(servegen_dir, input_mean=2000, output_mean=50)
    assert w.input_tokens.mean() == pytest.approx(2000, rel=0.05)
    assert w.output_tokens.mean() == pytest.approx(50, rel=0.05)
    sampler = LengthSampler(np.array([7, 9]), np.array([3, 5]))
    s = load_trace(servegen_dir, lengths=sampler)
    assert set(s.input_tokens.tolist()) == {7, 9}
    assert s.meta["lengths"] == sampler.describe()


def test_total_rate_file(write: Write) -> None:
    path = write("language_m-large_total_rate_10min.csv", TOTAL_RATE_TEXT)
    w = load_trace(path, seed=0)
    assert w.meta["layout"] == "total_rate"
    assert w.meta["expected_requests"] == pytest.approx(18_000)
    assert w.num_requests == pytest.approx(18_000, rel=0.03)
    t = w.arrival_s + float(w.meta["t0_offset_s"])  # type: ignore[arg-type]
    assert not np.any((t >= 600) & (t < 1200))


def test_total_rate_cv_makes_bursts(write: Write) -> None:
    path = write("total_rate_10min.csv", "window_start_s,total_rate_rps,active_clients\n0,50,1\n600,50,1\n")
    poisson = load_trace(path, seed=0)
    bursty = load_trace(path, seed=0, cv=3.0)
    assert bursty.meta["cv"] == 3.0

    def cv(t: np.ndarray) -> float:
        gaps = np.diff(t)
        return float(gaps.std() / gaps.mean())

    assert cv(poisson.arrival_s) == pytest.approx(1.0, abs=0.05)
    assert cv(bursty.arrival_s) == pytest.approx(3.0, rel=0.15)


def test_max_requests_guard(servegen_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"max_requests = 1,000.*start_s/duration_s"):
        load_trace(servegen_dir, max_requests=1000)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        pytest.param({"start_s": 4000}, "past the end", id="start-after-end"),
        pytest.param({"start_s": -5}, "start_s = -5", id="negative-start"),
        pytest.param({"duration_s": 0}, "duration_s = 0", id="zero-duration"),
        pytest.param({"cv": 0.0}, "cv = 0.0", id="zero-cv"),
        pytest.param({"seed": -1}, "seed = -1", id="negative-seed"),
    ],
)
def test_bad_generation_parameters(servegen_dir: Path, kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load_trace(servegen_dir, **kwargs)  # type: ignore[arg-type]


def test_idle_span_is_a_clear_error(servegen_dir: Path) -> None:
    with pytest.raises(TraceFormatError, match="no requests in"):
        load_trace(servegen_dir, start_s=2400, duration_s=600)


@pytest.mark.parametrize(
    ("text", "line", "field", "fragment"),
    [
        pytest.param(
            "0,1,1,Gamma,1,1\n600,1,1,Pareto,1,1\n",
            2,
            "iat_family",
            "unknown inter-arrival family",
            id="unknown-family",
        ),
        pytest.param(
            "0,1,1,Gamma,1,1\n600,fast,1,Gamma,1,1\n",
            2,
            "rate_rps",
            "not a rate: 'fast'",
            id="non-numeric-rate",
        ),
        pytest.param("0,-1,1,Gamma,1,1\n", 1, "rate_rps", "negative rate", id="negative-rate"),
        pytest.param("0,1,1,Weibull,0,1\n", 1, "p1", "shape must be in [0.001, 10000]", id="zero-shape"),
        pytest.param(
            "0,1,1,Gamma,1,1\n0,1,1,Gamma,1,1\n",
            2,
            "window_start_s",
            "window starts must increase",
            id="repeated-window",
        ),
        pytest.param(
            "0,1,1,Gamma,1,1\n600,1,1,Gamma,1\n",
            2,
            "p2",
            "expected 6 comma-separated fields, found 5",
            id="short-row",
        ),
    ],
)
def test_chunk_errors(write: Write, text: str, line: int, field: str, fragment: str) -> None:
    path = write("chunk-5-trace.csv", text)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, fmt="servegen")
    assert fragment in str(info.value)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), line, field)


def test_error_in_one_client_of_a_directory_names_that_file(servegen_dir: Path) -> None:
    bad = servegen_dir / "chunk-9-trace.csv"
    bad.write_text(CHUNK_1_TEXT + "3600,1,1,Gamma,x,1\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(servegen_dir)
    assert (info.value.path, info.value.line, info.value.field) == (str(bad), 7, "p1")


def test_total_rate_missing_column(write: Write) -> None:
    path = write("t_total_rate_10min.csv", "window_start_s,total_rate_rps\n0,1\n")
    path.write_text("window_start_s,rate\n0,1\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, fmt="servegen")
    assert info.value.field == "total_rate_rps"
    assert info.value.line == 1
