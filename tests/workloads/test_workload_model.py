"""The Workload value: invariants, normalisation, derived statistics."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmscale.workloads import Workload


def _w(times: list[float], inp: list[int] | None = None, out: list[int] | None = None) -> Workload:
    n = len(times)
    return Workload("t", np.array(times), np.array(inp or [1] * n), np.array(out or [1] * n), {})


def test_from_arrays_sorts_and_shifts() -> None:
    w = Workload.from_arrays("x", [7.0, 5.0, 6.0], [1, 2, 3], [4, 5, 6])
    np.testing.assert_allclose(w.arrival_s, [0.0, 1.0, 2.0])
    assert w.input_tokens.tolist() == [2, 3, 1]
    assert w.output_tokens.tolist() == [5, 6, 4]
    assert w.meta == {"sorted": True, "t0_offset_s": 5.0}
    assert w.arrival_s.dtype == np.float64
    assert w.input_tokens.dtype == np.int64


def test_arrays_are_read_only_copies() -> None:
    times = np.array([0.0, 1.0])
    w = Workload("x", times, np.array([1, 1]), np.array([1, 1]))
    times[1] = 99.0
    assert w.arrival_s[1] == 1.0
    with pytest.raises(ValueError):
        w.arrival_s[0] = 3.0


def test_frozen() -> None:
    w = _w([0.0])
    with pytest.raises(AttributeError):
        w.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("times", "inp", "out", "meta", "fragment"),
    [
        pytest.param([], [], [], {}, "at least one request", id="empty"),
        pytest.param([0.0, 1.0], [1], [1, 1], {}, "differ in length", id="ragged"),
        pytest.param([0.0, 2.0, 1.0], [1, 1, 1], [1, 1, 1], {}, "sorted", id="unsorted"),
        pytest.param([1.0, 2.0], [1, 1], [1, 1], {}, "start at 0.0", id="not-rebased"),
        pytest.param([0.0, np.inf], [1, 1], [1, 1], {}, "non-finite", id="infinite"),
        pytest.param([0.0], [0], [1], {}, ">= 1", id="zero-tokens"),
        pytest.param([0.0], [1], [1], {"x": object()}, "JSON-serialisable", id="meta-not-json"),
        pytest.param([[0.0]], [1], [1], {}, "1-D", id="two-dimensional"),
    ],
)
def test_invariants_rejected(
    times: list[float], inp: list[int], out: list[int], meta: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        Workload("bad", np.array(times), np.array(inp), np.array(out), meta)


def test_summary_statistics() -> None:
    # 120 requests in minute 0, 60 in minute 1: peak 2 req/s, mean 180 / 119.5 s.
    times = np.concatenate((np.linspace(0, 59.5, 120), np.linspace(60, 119.5, 60)))
    w = Workload("s", times, np.arange(1, 181), np.full(180, 7), {"format": "csv"})
    s = w.summary()
    json.dumps(s)
    assert s["requests"] == 180
    assert s["duration_s"] == pytest.approx(119.5)
    assert s["mean_rps"] == pytest.approx(180 / 119.5, rel=1e-6)
    assert s["peak_1min_rps"] == pytest.approx(2.0)
    assert s["input_mean_tokens"] == pytest.approx(90.5)
    assert s["input_p50_tokens"] == pytest.approx(90.5)
    assert s["output_p99_tokens"] == 7.0
    assert len(w) == w.num_requests == 180


def test_single_request_has_zero_rate() -> None:
    w = _w([0.0])
    assert w.duration_s == 0.0
    assert w.mean_rate_rps == 0.0
    assert w.summary()["peak_1min_rps"] == pytest.approx(1 / 60, abs=1e-6)


def test_repr_is_short() -> None:
    assert repr(_w([0.0, 1.0])) == "Workload(name='t', requests=2, duration_s=1.000, mean_rps=2.000)"
