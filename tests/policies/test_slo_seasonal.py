"""``slo`` reads the same time of past days when the controller's history has them (docs/history.md).

The history is built by hand with one bin a cold start long (108 s, 24 bins a "day" of 2,592 s),
so "now" and "one cold start ahead" are the middles of two neighbouring bins and each past day's
ratio is exactly the two cells' quotient.
"""

from __future__ import annotations

import math

import pytest

from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.history import HistoryCell, RateHistory
from llmscale.policies.base import create_policy
from llmscale.policies.slo import SloPolicy
from llmscale.seasonal import seasonal_rise
from llmscale.types import FleetView, Signals, SignalValue

BIN_S = 108.0
PERIOD_S = 24 * BIN_S
EPOCH = 1_767_571_200.0  # 2026-01-05T00:00:00Z, a whole number of bins
TODAY = 7
NOW_S = TODAY * PERIOD_S + 10.5 * BIN_S  # the middle of bin 10 of day 7 (simulated seconds)


def _history(ratios: list[float], levels: list[float] | None = None) -> RateHistory:
    """Past days (newest first) at ``levels`` in bin 10 and ``level x ratio`` in bin 11."""
    levels = levels or [20.0] * len(ratios)
    cells = []
    for k, (ratio, level) in enumerate(zip(ratios, levels, strict=True), start=1):
        first = int((EPOCH + (TODAY - k) * PERIOD_S) // BIN_S)
        cells += [HistoryCell(first + 10, 1, level), HistoryCell(first + 11, 1, level * ratio)]
    return RateHistory(period_s=PERIOD_S).with_cells(cells)


def _decide(history: RateHistory | None, params: dict[str, object] | None = None):
    policy = create_policy("slo", Deployment(cold_start_s=BIN_S), params or {})
    assert isinstance(policy, SloPolicy)
    signals = Signals(
        NOW_S,
        FleetView(spec_replicas=2, ready=2),
        {
            "request_rate_rps": SignalValue(20.0),
            "queue_waiting": SignalValue(0.0),
            "running": SignalValue(40.0),
        },
        rate_history=history,
        clock_epoch_s=EPOCH,
    )
    decision, _ = policy.decide(signals, policy.initial_state(), NOW_S)
    return decision


#: seven days rising x1.30 with a spread of 0.05 (the worked example of SloPolicy._seasonal)
AGREE = [1.35, 1.25, 1.35, 1.25, 1.35, 1.25, 1.30]


@pytest.mark.parametrize(
    ("history", "params", "forecast_rps", "cited"),
    [
        # no history, or one day: the causal forecast (the level, no trend yet), nothing logged
        pytest.param(None, None, 20.0, False, id="no-history"),
        pytest.param(_history([1.3]), None, 20.0, False, id="one-day"),
        # 20 x (1.30 - 0.05 x sqrt(8/7)) = 24.93; 0.75 x 24.93 + 0.25 x 20 = 23.70
        pytest.param(_history(AGREE), None, 23.70, True, id="seven-days-agree"),
        # the days' levels do not matter, only how each moved
        pytest.param(_history(AGREE, [5.0, 50, 20, 9, 31, 12, 40]), None, 23.70, True, id="any-levels"),
        # two days agreeing count 2/7 of 0.75: 20 x 1.3 = 26; 0.214 x 26 + 0.786 x 20 = 21.29
        pytest.param(_history([1.3, 1.3]), None, 21.29, True, id="two-days"),
        # days that disagree (1.6, 1.0, 1.3: sd 0.3) plan x0.954: no rise planned
        pytest.param(_history([1.6, 1.0, 1.3]), None, 20.0, False, id="days-disagree"),
        # a fall the days agree on is left to the scale-down guards
        pytest.param(_history([0.7] * 7), None, 20.0, False, id="fall"),
        pytest.param(_history(AGREE), {"seasonal_weight": 0.0}, 20.0, False, id="weight-0"),
    ],
)
def test_the_same_time_of_past_days_raises_the_forecast_as_far_as_they_agree(
    history, params, forecast_rps, cited
):
    d = _decide(history, params)
    assert d.inputs["forecast_rps"] == pytest.approx(forecast_rps, abs=0.01)
    assert ("seasonal:" in d.note) is cited
    if cited:
        assert "past days" in d.note and d.inputs["causal_forecast_rps"] == pytest.approx(20.0)
    if history is None or params is not None or len(history.cells) < 4:
        # nothing of the history in the decision log: a run without one logs what it always did
        assert not any(k.startswith("seasonal") for k in d.inputs)
        assert d.note == ""


def test_seasonal_rise_worked_numbers():
    three = seasonal_rise(_history([1.30, 1.25, 1.35]), EPOCH + NOW_S, BIN_S)
    assert three is not None and three.days == 3
    assert (three.mean, three.sd) == pytest.approx((1.30, 0.05))
    assert three.planned == pytest.approx(1.30 - 0.05 * math.sqrt(4 / 3))  # 1.242
    wide = seasonal_rise(_history([1.6, 1.0, 1.3]), EPOCH + NOW_S, BIN_S)
    assert wide is not None and wide.planned == pytest.approx(0.954, abs=1e-3)
    assert seasonal_rise(_history([1.3]), EPOCH + NOW_S, BIN_S) is None
    assert seasonal_rise(RateHistory(), EPOCH + NOW_S, BIN_S) is None
    with pytest.raises(ConfigError, match="horizon_s = -1"):
        seasonal_rise(RateHistory(), 0.0, -1.0)


def test_rates_are_read_between_bin_middles():
    # yesterday 40 req/s over 08:00-09:00 and 100 over 09:00-10:00 (hour bins)
    day, hour = 86_400.0, 3600.0
    h = RateHistory().with_cells(
        [
            HistoryCell(int((EPOCH + 8 * hour) // hour), 1, 40.0),
            HistoryCell(int((EPOCH + 9 * hour) // hour), 1, 100.0),
        ]
    )
    today = EPOCH + day
    assert h.rate_on_day(today + 8.5 * hour, 1) == pytest.approx(40.0)
    assert h.rate_on_day(today + 9 * hour, 1) == pytest.approx(70.0)
    assert h.rate_on_day(today + 9.25 * hour, 1) == pytest.approx(85.0)
    assert h.rate_on_day(today + 8.1 * hour, 1) == pytest.approx(40.0)  # no 07:00 cell: its own mean
    assert h.rate_on_day(today + 11 * hour, 1) is None
    assert h.rate_on_day(today + 9 * hour, 2) is None
