"""End to end: the multi-day preset in the backtest, its eviction window reading same-hour history.

Days are compressed to 1,200 s (24 bins of 50 s) so two days of ServeGen-shaped traffic run in
seconds; the controller's history uses the same period. Bounded: ~19k requests, two runs.
"""

from __future__ import annotations

import io
import json
import re

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.guards import eviction_window_s
from llmscale.history import RateHistory, history_before
from llmscale.workloads.presets import make_preset

DAY_S = 1200.0


def _drains(workload, settings):
    out = io.StringIO()
    result = run_policy(workload, "knative-kpa", settings, decisions_out=out)
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    return result.summary, [r for r in lines if r.get("guard") == "drain"]


def test_a_seeded_history_sizes_the_eviction_window_from_the_first_day():
    # the run: ServeGen days 3-4; the seed: days 1-2 of the same shape, placed just before the run
    run = make_preset("multi-day", seed=1, duration_s=2 * DAY_S, day_s=DAY_S, rate_rps_mean=8.0, first_day=2)
    past = make_preset("multi-day", seed=2, duration_s=2 * DAY_S, day_s=DAY_S, rate_rps_mean=8.0, first_day=0)
    base = BacktestSettings(
        min_replicas=1, max_replicas=12, initial_replicas=2, history=RateHistory(period_s=DAY_S)
    )
    seeded = BacktestSettings(
        min_replicas=1,
        max_replicas=12,
        initial_replicas=2,
        history=history_before(past.arrival_s, base.start_unix_s, period_s=DAY_S),
    )
    _, plain = _drains(run, base)
    _, from_history = _drains(run, seeded)
    # Without a seed the run's own two days give the same hour at most one past day before the
    # trace ends: the in-window spread sizes every window, as it did before the history existed.
    assert plain and not any("same-hour std" in r["guard_note"] for r in plain if r["time_s"] < 2 * DAY_S)
    # Seeded, the window reads the two seeded days' spread from the run's first bins on.
    cited = [r for r in from_history if "same-hour std" in r["guard_note"]]
    assert cited and cited[0]["time_s"] < DAY_S / 4
    for r in cited:
        m = re.search(r"eviction window (\d+)s \(same-hour std ([0-9.]+) req/s", r["guard_note"])
        assert m is not None, r["guard_note"]
        window, std = float(m.group(1)), float(m.group(2))
        # the window is at least what the history's spread alone gives (TTFT only adds to it)
        assert window >= round(eviction_window_s(std, 0.0)) - 1
