"""Seed 003 2.5's rhythm features (sliding DFT) and the EWMA z-score of the load."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from signals_fixtures import obs, sample

from llmscale.metrics.names import VLLM
from llmscale.signals.rhythm import dft_bin, dominant_rhythm, ewma_zscore, rhythm_signals
from llmscale.signals.window import FleetWindow


def _wave(n=20, cycles=2, amp=3.0, level=10.0, peak_at_end=True, decay=1.0):
    m = n - 1
    out = []
    for i in range(n):
        shift = (n - 1) if peak_at_end else 0
        out.append(level + amp * decay ** (i) * math.cos(2 * math.pi * cycles * (i - shift) / m))
    return out


def test_dft_bin_of_a_cosine():
    # x_n = cos(2 pi n / 8): X_1 = N/2 = 4, X_2 = 0
    xs = [math.cos(2 * math.pi * n / 8) for n in range(8)]
    assert dft_bin(xs, 1) == pytest.approx(4.0)
    assert abs(dft_bin(xs, 2)) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    ("series", "ratio", "phase", "decay_sign", "k"),
    [
        # two cycles per 19-sample window, peaking at the newest sample
        pytest.param(_wave(), 1.0, 0.0, 0, 2, id="pure-wave-at-peak"),
        # a quarter period after the peak (falling): phase +pi/2
        pytest.param(
            [10 + 3 * math.cos(2 * math.pi * 2 * (i - 19) / 19 + math.pi / 2) for i in range(20)],
            1.0,
            math.pi / 2,
            0,
            2,
            id="falling-quarter-period",
        ),
        # a fading wave: the earlier window is stronger -> decay > 0
        pytest.param(_wave(decay=0.9), None, None, 1, 2, id="fading-decay-positive"),
        pytest.param(_wave(decay=1.1), None, None, -1, 2, id="growing-decay-negative"),
    ],
)
def test_dominant_rhythm(series, ratio, phase, decay_sign, k):
    r = dominant_rhythm(series)
    assert r is not None
    assert r.bin == k and r.window == 19
    if ratio is not None:
        assert r.amplitude_ratio == pytest.approx(ratio, abs=1e-9)
    if phase is not None:
        assert r.phase_rad == pytest.approx(phase, abs=1e-9)
    assert r.decay is not None
    if decay_sign == 0:
        assert r.decay == pytest.approx(0.0, abs=1e-9)
    else:
        assert math.copysign(1, r.decay) == decay_sign


def test_flat_load_has_no_rhythm_and_short_series_none():
    r = dominant_rhythm([7.0] * 20)
    assert r is not None
    assert (r.amplitude_ratio, r.decay, r.phase_rad, r.bin) == (0.0, None, None, 0)
    assert dominant_rhythm([1.0, 2.0, 3.0, 4.0]) is None


@given(st.lists(st.floats(0, 1e4), min_size=5, max_size=20))
def test_rhythm_ranges(series):
    r = dominant_rhythm(series)
    assert r is not None
    assert 0.0 <= r.amplitude_ratio <= 1.0 + 1e-9
    if r.decay is not None:
        assert -1.0 <= r.decay <= 1.0
        assert r.phase_rad is not None and -math.pi < r.phase_rad <= math.pi + 1e-12


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        # 19 at 10 then 12: mu 10.1, var 0.05 x 1.9^2, z = 1/sqrt(0.05) = 4.472
        pytest.param([10.0] * 19 + [12.0], 1 / math.sqrt(0.05), id="step-reads-4.47"),
        pytest.param([10.0] * 19 + [8.0], -1 / math.sqrt(0.05), id="drop"),
        pytest.param([5.0] * 20, 0.0, id="constant"),
        pytest.param([5.0], None, id="one-sample"),
    ],
)
def test_ewma_zscore(series, expected):
    z = ewma_zscore(series)
    assert z == (None if expected is None else pytest.approx(expected, rel=1e-6))


def test_rhythm_signals_read_running_plus_waiting_plus_gateway():
    load = _wave()
    window = [
        obs(15.0 * i, sample("a", {VLLM.running: x - 2.0, VLLM.waiting: 1.0}), gateway=1)
        for i, x in enumerate(load)
    ]
    values = rhythm_signals(FleetWindow.build(window))
    assert values["rhythm_amplitude_ratio"].value == pytest.approx(1.0)
    assert values["rhythm_phase"].value == pytest.approx(0.0, abs=1e-9)
    assert values["load_zscore"].valid
    short = rhythm_signals(FleetWindow.build(window[:3]))
    assert short["rhythm_decay"].value is None and "needs 5" in short["rhythm_decay"].note
