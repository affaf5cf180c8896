"""``rate_scale``'s two modes on real traces, and ``--lengths`` for rate-only traces.

``users`` (independently time-shifted copies: N times the users) against ``burst`` (each request
copied next to itself: every burst N times larger). On the shared traces the peak second of x10
is computed in both modes; docs/scaling-traces.md quotes the same computation.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from llmscale.errors import ConfigError
from llmscale.workloads import load_trace, rate_scale
from llmscale.workloads.lengths import assumed_lengths_text, parse_lengths

DATA = Path(os.environ.get("LLMSCALE_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
TRACES = DATA / "traces"


def _per_second(arrival_s: np.ndarray) -> np.ndarray:
    return np.bincount(np.floor(arrival_s).astype(np.int64))


def _trace(name: str, fmt: str):  # type: ignore[no-untyped-def]
    path = TRACES / name
    if not path.is_file():
        pytest.skip(f"needs the shared trace {path} (../shared/data)")
    return load_trace(path, fmt)


@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        pytest.param("azure_llm_2023_conv.csv", "azure", id="azure"),
        pytest.param("mooncake_synthetic_trace.jsonl", "mooncake", id="mooncake"),
    ],
)
def test_users_mode_peaks_lower_than_burst_mode(name: str, fmt: str) -> None:
    w = _trace(name, fmt)
    burst = rate_scale(w, 10.0, seed=0, mode="burst")
    users = rate_scale(w, 10.0, seed=0, mode="users")
    assert burst.num_requests == users.num_requests == 10 * w.num_requests
    peak_1, peak_burst, peak_users = (int(_per_second(x.arrival_s).max()) for x in (w, burst, users))
    # Burst mode repeats every busy second ~10 times over; ten shifted copies rarely line up.
    assert peak_burst >= 8 * peak_1
    assert peak_users < 0.8 * peak_burst
    # Both keep the shape beyond the shift: each 10-minute count within 5% of 10x the original's.
    edges = np.arange(0.0, w.duration_s + 600.0, 600.0)
    orig = np.histogram(w.arrival_s, edges)[0][:-1]
    for x in (burst, users):
        counts = np.histogram(x.arrival_s, edges)[0][:-1]
        assert np.allclose(counts, 10 * orig, rtol=0.05, atol=50), (counts, 10 * orig)
    # Users keep their own lengths: every (prompt, output) pair of a copy is one of the trace's.
    pairs = set(zip(w.input_tokens.tolist(), w.output_tokens.tolist(), strict=True))
    assert set(zip(users.input_tokens.tolist(), users.output_tokens.tolist(), strict=True)) <= pairs
    assert users.meta["transforms"][-1]["mode"] == "users"


@pytest.mark.shared_data
def test_modes_agree_below_one_and_are_deterministic() -> None:
    w = _trace("azure_llm_2023_conv.csv", "azure")
    a, b = rate_scale(w, 0.5, seed=1, mode="users"), rate_scale(w, 0.5, seed=1, mode="burst")
    assert np.array_equal(a.arrival_s, b.arrival_s)
    c, d = rate_scale(w, 2.5, seed=4, mode="users"), rate_scale(w, 2.5, seed=4, mode="users")
    assert np.array_equal(c.arrival_s, d.arrival_s) and c.num_requests == round(2.5 * w.num_requests)
    assert np.all(np.diff(c.arrival_s) >= 0) and c.arrival_s[0] >= 0 and c.arrival_s[-1] <= w.arrival_s[-1]


def test_unknown_mode_is_named() -> None:
    from llmscale.workloads import poisson

    with pytest.raises(ConfigError, match="scale mode = 'crowd'"):
        rate_scale(poisson(5.0, 60.0, seed=0), 2.0, mode="crowd")


def test_lengths_parsed_to_the_means_and_cvs_given() -> None:
    m = parse_lengths("prompt=600:1.5,output=1500:0.8")
    rng = np.random.default_rng(0)
    inp, out = m.sample(200_000, rng)
    assert inp.mean() == pytest.approx(600, rel=0.03) and out.mean() == pytest.approx(1500, rel=0.02)
    assert out.std() / out.mean() == pytest.approx(0.8, rel=0.05)
    assert m.input_sigma == pytest.approx(math.sqrt(math.log(1 + 1.5**2)))
    assert (
        assumed_lengths_text(m.describe()) == "prompt 600 / output 1,500 tokens (lognormal, CV 1.50 / 0.80)"
    )
    # CV defaults to a lognormal of sigma 1 (CV 1.31), as the ServeGen loader's default
    assert parse_lengths("output=155,prompt=914").describe() == parse_lengths("m-large").describe()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        pytest.param("prompt=600", "output missing", id="missing-output"),
        pytest.param("prompt=abc,output=5", "prompt = 'abc'", id="not-a-number"),
        pytest.param("prompt=600,output=0", "output mean = 0", id="zero-mean"),
        pytest.param("prompt=600:-1,output=5", "prompt CV = -1", id="negative-cv"),
        pytest.param("input=600,output=5", "field 'input=600'", id="unknown-field"),
        pytest.param("prompt=6,prompt=7,output=5", "prompt is given twice", id="twice"),
        pytest.param("chat", "field 'chat'", id="unknown-name"),
    ],
)
def test_bad_lengths_name_the_field(text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")) as e:
        parse_lengths(text)
    assert str(e.value).startswith("--lengths")
