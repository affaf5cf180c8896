"""End to end: ``slo`` meets the daily rise with seven days of same-hour history (docs/history.md).

The multi-day preset's ServeGen days 8-9 (days of 1,200 s: 24 bins of 50 s) at 40 req/s on the
backtest's default fleet (Llama-3-8B on H100s, replicas that start in 90 s). Each day dips at
hours 5-9 (0.79 of the mean at hour 8) and rises 40% by hour 11 in about 125 s. Without history,
``slo`` shrinks in the dip and the rise outruns the replica it then asks for; with the seven days
before (ServeGen days 1-7) it sees the rise one cold start ahead and holds the fleet through the
dip. Bounded: ~96k requests a run, two runs.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.history import RateHistory, history_before
from llmscale.workloads.presets import make_preset

DAY_S = 1200.0
BIN_S = DAY_S / 24


def _run(workload, settings):
    out = io.StringIO()
    summary = run_policy(workload, "slo", settings, decisions_out=out).summary
    return summary, [json.loads(line) for line in out.getvalue().splitlines()]


def _late(ticks, slo_ttft_s: float) -> list[tuple[int, int]]:
    """(day, hour) of the ticks whose TTFT P99 is over the SLO."""
    return [
        (int(r["time_s"] // DAY_S), int(r["time_s"] % DAY_S // BIN_S))
        for r in ticks
        if ((r.get("observed") or {}).get("ttft_p99_s") or 0.0) > slo_ttft_s
    ]


@pytest.mark.slow
def test_seven_days_of_history_carry_slo_through_the_daily_rise():
    run = make_preset("multi-day", seed=1, duration_s=2 * DAY_S, day_s=DAY_S, rate_rps_mean=40.0, first_day=7)
    past = make_preset(
        "multi-day", seed=2, duration_s=7 * DAY_S, day_s=DAY_S, rate_rps_mean=40.0, first_day=0
    )
    base = BacktestSettings(
        min_replicas=1,
        max_replicas=40,
        initial_replicas=3,
        history=RateHistory(period_s=DAY_S),
    )
    assert base.deployment().cold_start_s == 90.0
    seeded = replace(base, history=history_before(past.arrival_s, base.start_unix_s, period_s=DAY_S))
    plain, plain_ticks = _run(run, base)
    known, known_ticks = _run(run, seeded)

    # Without history (the run's own first day is one day: no spread, no forecast) slo is late at
    # the second day's rise: the TTFT P99 is over the SLO from hour 11 to 14. (Both runs
    # start 3 replicas short of the first hour: the misses of day 0's first hours are the same.)
    slo_ttft = base.slo_ttft_s
    assert any(day == 1 and 9 <= hour <= 18 for day, hour in _late(plain_ticks, slo_ttft))
    assert not any(day == 1 for day, _ in _late(known_ticks, slo_ttft))
    # the reason is in the log: the same time of seven past days, one cold start ahead
    cited = [r for r in known_ticks if r["note"].startswith("seasonal: same time of 7 past days")]
    assert cited and all("within the next 90s" in r["note"] for r in cited)
    assert not any("seasonal" in r["note"] for r in plain_ticks)
    # through the dip before the rise (day 1, hours 8-10) the seeded run keeps more replicas
    dip = (DAY_S + 8 * BIN_S, DAY_S + 10 * BIN_S)

    def dip_min(ticks):
        return min(r["replicas"]["spec"] for r in ticks if dip[0] <= r["time_s"] <= dip[1])

    assert dip_min(known_ticks) > dip_min(plain_ticks)
    # Measured: attainment 0.952 -> 0.979 of feasible requests, GPU-hours 2.859 -> 2.819 (-1.4%).
    assert known["slo_attainment_feasible"] > plain["slo_attainment_feasible"] + 0.02
    assert known["gpu_hours"] < 1.05 * plain["gpu_hours"]
