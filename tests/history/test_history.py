"""Same-hour rate history (llmscale.history), the seasonal forecaster and the eviction window."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.errors import ConfigError
from llmscale.guards import GuardConfig, GuardState, apply_guards, eviction_window_s
from llmscale.history import (
    DAY_S,
    HistoryCell,
    RateHistory,
    history_before,
    history_from_arrivals,
)
from llmscale.seasonal import seasonal_forecast
from llmscale.types import Decision, FleetView, Signals, SignalValue
from llmscale.workloads.presets import SERVEGEN_DAY_LEVEL, make_preset

H = 3600.0
MONDAY = 1_767_571_200.0  # 2026-01-05T00:00:00Z


def past_days(rates_by_day: list[dict[int, float]], today: int = 7) -> RateHistory:
    """A history whose day ``today - 1 - i`` has hour h at ``rates_by_day[i][h]``."""
    cells = []
    for i, hours in enumerate(rates_by_day):
        day = today - 1 - i
        for hour, rate in hours.items():
            cells.append(HistoryCell(int((MONDAY + day * DAY_S + hour * H) // H), 1, rate))
    return RateHistory().with_cells(cells)


def test_the_same_hour_of_past_days_newest_first_without_today():
    h = past_days([{14: 60.0}, {14: 70.0}, {14: 80.0}, {14: 60.0}, {14: 70.0}])
    now = MONDAY + 7 * DAY_S + 14 * H + 20 * 60  # 14:20 on day 7
    assert h.same_hour(now) == (60.0, 70.0, 80.0, 60.0, 70.0)
    # population std of 60, 70, 80, 60, 70: sqrt(56) = 7.48 req/s (the docstring's example)
    assert h.same_hour_std_rps(now) == pytest.approx(7.483, abs=1e-3)
    assert h.same_hour(now + H) == ()  # 15:00 was never seen
    assert h.same_hour_std_rps(now + H) is None


def test_one_past_day_gives_no_spread():
    h = past_days([{14: 60.0}])
    assert h.same_hour_std_rps(MONDAY + 7 * DAY_S + 14 * H) is None


def test_observations_average_per_hour_and_close_on_the_next():
    h = RateHistory()
    for minute, rate in ((0, 10.0), (20, 20.0), (40, 30.0)):
        h = h.observe(MONDAY + minute * 60, rate)
    assert h.cells == () and h.open_cell is not None and h.open_cell.mean_rps == pytest.approx(20.0)
    h = h.observe(MONDAY + H, 50.0)
    assert [c.mean_rps for c in h.cells] == [pytest.approx(20.0)]
    # a gap (None) or a clock stepping back files nothing
    assert h.observe(MONDAY + H + 60, None) is h
    assert h.observe(MONDAY + 10, 99.0) is h


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(st.floats(0.0, 3 * H), min_size=1, max_size=60), days_kept=st.integers(1, 3))
def test_memory_is_bounded_whatever_the_run_length(steps, days_kept):
    h = RateHistory(days_kept=days_kept)
    t = MONDAY
    for dt in steps:
        t += dt
        h = h.observe(t, 5.0)
        assert len(h.cells) <= days_kept * 24
        assert all(a.index < b.index for a, b in zip(h.cells, h.cells[1:], strict=False))


def test_seeded_from_a_trace_counts_whole_hours_only():
    # 10 req/s for 2.5 h starting at 00:30: whole hours 01:00 and 02:00 (00:xx and 03:00 partial)
    arrivals = np.arange(0.0, 2.5 * H + 0.05, 0.1)  # the last arrival at 03:00 closes 02:00-03:00
    h = history_from_arrivals(arrivals, MONDAY + 0.5 * H)
    assert [c.index for c in h.cells] == [int(MONDAY // H) + 1, int(MONDAY // H) + 2]
    assert [c.mean_rps for c in h.cells] == [pytest.approx(10.0), pytest.approx(10.0)]


def test_a_trace_before_the_run_keeps_its_hours_of_day():
    # a 2-day trace seeds the two days before a run starting Monday midnight
    arrivals = np.sort(np.random.default_rng(0).uniform(0.0, 2 * DAY_S, 20_000))
    h = history_before(arrivals, MONDAY)
    assert h.cells[0].index == int((MONDAY - 2 * DAY_S) // H)
    assert len(h.same_hour(MONDAY + 9 * H)) == 2


def test_bad_history_settings_are_named():
    with pytest.raises(ConfigError, match="period_s"):
        RateHistory(period_s=0.0)
    with pytest.raises(ConfigError, match="bins_per_period"):
        RateHistory(bins_per_period=0)


# -- the seasonal forecaster --------------------------------------------------------------------
def test_the_worked_forecast_of_the_module_docstring():
    # past 7 days: 40 req/s at 08:00, 100 at 09:00; today 48 at 08:50 (level 1.2), flat
    h = past_days([{8: 40.0, 9: 100.0}] * 7)
    f = seasonal_forecast(h, MONDAY + 7 * DAY_S + 8 * H + 50 * 60, 600.0, 48.0)
    assert f is not None
    assert (f.level, f.seasonal_rps, f.trend_rps, f.weight) == pytest.approx((1.2, 120.0, 48.0, 0.75))
    assert f.rate_rps == pytest.approx(102.0)
    assert "same hour of 7 past days" in f.reason()


def test_fewer_days_weigh_less_and_a_quantile_plans_for_a_busy_day():
    h = past_days([{8: 40.0, 9: 80.0}, {8: 40.0, 9: 120.0}])
    now = MONDAY + 7 * DAY_S + 8 * H + 50 * 60
    mean = seasonal_forecast(h, now, 600.0, 40.0)
    busy = seasonal_forecast(h, now, 600.0, 40.0, quantile=0.9)
    assert mean is not None and busy is not None
    assert mean.weight == pytest.approx(0.75 * 2 / 7)
    assert mean.seasonal_rps == pytest.approx(100.0)
    assert busy.seasonal_rps == pytest.approx(116.0)  # 0.9 quantile of 80, 120; level 1 at 08:00


def test_no_history_means_no_seasonal_forecast():
    assert seasonal_forecast(RateHistory(), MONDAY, 600.0, 40.0) is None
    with pytest.raises(ConfigError, match="seasonal_weight"):
        seasonal_forecast(RateHistory(), MONDAY, 600.0, 40.0, seasonal_weight=2.0)


# -- the eviction window reads the history -------------------------------------------------------
DRAIN = GuardConfig(
    min_replicas=1,
    max_replicas=20,
    hold_on_missing_data=False,
    pending_aware=False,
    headroom_max_usage=None,
    drain_aware=True,
)


def _signals(std_rps: float) -> Signals:
    values = {"ttft_p95_s": SignalValue(0.05), "request_rate_std_rps": SignalValue(std_rps)}
    return Signals(time_s=0.0, fleet=FleetView(spec_replicas=4, ready=4), values=values)


@pytest.mark.parametrize(
    ("history", "window_s"),
    [
        # no history: the in-window spread, 2 req/s: 15 + 5 + 40 = 60 s
        pytest.param(None, 60.0, id="no-history-in-window"),
        pytest.param(past_days([{14: 60.0}]), 60.0, id="one-day-falls-back"),
        # seed 003 4.3: std of the same hour over the past days, 7.48 req/s: 15 + 18.7 + 40 = 73.7 s
        pytest.param(
            past_days([{14: 60.0}, {14: 70.0}, {14: 80.0}, {14: 60.0}, {14: 70.0}]), 73.7, id="five-days"
        ),
    ],
)
def test_the_eviction_window_uses_the_same_hour_when_it_has_two_days(history, window_s):
    now_s = 14 * H + 20 * 60
    epoch = MONDAY + 7 * DAY_S
    decision = Decision(3, "r")
    out, state = apply_guards(decision, _signals(2.0), DRAIN, GuardState(), now_s, epoch, history)
    assert (out.desired, out.guard) == (4, "drain")
    assert f"eviction window {window_s:.0f}s" in out.note
    assert ("same-hour std" in out.note) == (window_s != 60.0)
    assert eviction_window_s(2.0, 50.0) == pytest.approx(60.0)
    later = now_s + window_s + 0.5
    out, _ = apply_guards(decision, _signals(2.0), DRAIN, state, later, epoch, history)
    assert out.desired == 3


def test_the_multi_day_preset_follows_servegens_days():
    w = make_preset("multi-day", seed=0, duration_s=3 * 2400.0, day_s=2400.0, rate_rps_mean=20.0)
    per_day = np.bincount((w.arrival_s // 2400.0).astype(int), minlength=3)[:3]
    levels = np.array(SERVEGEN_DAY_LEVEL[:3])
    # day means follow the published levels (1.426, 1.068, 1.027) to within Poisson noise
    np.testing.assert_allclose(per_day / per_day.mean(), levels / levels.mean(), rtol=0.03)
    assert w.num_requests == pytest.approx(20.0 * 3 * 2400.0, rel=0.03)
    with pytest.raises(ConfigError, match=r"first_day = 2\.5"):
        make_preset("multi-day", first_day=2.5)
    half = make_preset("multi-day", seed=0, duration_s=1.5 * 2400.0, day_s=2400.0, rate_rps_mean=20.0)
    assert half.duration_s <= 1.5 * 2400.0 and half.num_requests == pytest.approx(20.0 * 3600.0, rel=0.03)
    assert replace(RateHistory(period_s=2400.0)).bin_s == 100.0


# -- the controller files the history and hands it to the policy ---------------------------------
@dataclass(frozen=True)
class _Forecasting:
    """A policy that plans one replica per 10 req/s of the seasonal forecast 10 minutes ahead."""

    name: str = "forecasting"
    tick_s: float = 60.0

    def initial_state(self) -> None:
        return None

    def decide(self, signals: Signals, state: None, now_s: float) -> tuple[Decision, None]:
        assert signals.rate_history is not None
        f = seasonal_forecast(
            signals.rate_history,
            signals.time_s + signals.clock_epoch_s,
            600.0,
            signals.get("arrival_rate_rps") or 0.0,
            days=2,
        )
        if f is None:
            return Decision(signals.fleet.spec_replicas, "no-history"), None
        return Decision(max(1, round(f.rate_rps / 10.0)), "seasonal", note=f.reason()), None


def test_the_controller_files_observed_rates_and_the_policy_forecasts_from_them():
    from llmscale.controller.core import Controller, initial_state, tick
    from llmscale.types import Observation, Phase, ReplicaSample

    # two past days seeded: 40 req/s at 08:00, 100 at 09:00; the run starts 08:00 on day 3
    seed = past_days([{8: 40.0, 9: 100.0}, {8: 40.0, 9: 100.0}], today=2)
    epoch = MONDAY + 2 * DAY_S + 8 * H
    c = Controller(_Forecasting(), replace(DRAIN, drain_aware=False), None, clock_epoch_s=epoch, history=seed)
    state = initial_state(c, 60.0)
    record = None
    for k in range(1, 52):  # one tick a minute to 08:51, arrivals counted at 40 req/s
        sample = ReplicaSample("r0", Phase.READY, ok=True, values={"vllm:num_requests_running": 4.0})
        obs = Observation(60.0 * k, FleetView(4, ready=4), (sample,), arrivals_total=2400 * k)
        record, state, _ = tick(c, state, obs)
    assert record is not None and record.proposed.rule == "seasonal"
    # 08:51 + 10 min = 09:01: the past days' 100 req/s at today's level 1.0, weight 0.75 with both
    # days: 0.75 x 100 + 0.25 x 40 = 85 req/s -> 8 replicas, where the flat trend alone asks for 4
    assert record.proposed.desired == 8
    assert "forecast 85.0 req/s" in record.proposed.note
    assert state.history is not None and state.history.open_cell is not None  # 08:00 of today, filed
