"""The live loop ticks at the policy's cadence (it once ticked every 15 s whatever the policy's
``tick_s``), or at the configuration's ``tick_s`` when one is given."""

from __future__ import annotations

import threading
import time

from live_fakes import PLAIN, FakeCluster, FollowingSource, controller

from llmscale.clock import WallClock
from llmscale.controller.decision_log import policy_version
from llmscale.controller.live import PolicyRun
from llmscale.deployment import Deployment
from llmscale.policies.base import create_policy


def _knative(tick_s: float) -> PolicyRun:
    params = {"tick_s": tick_s}
    return PolicyRun(
        create_policy("knative-kpa", Deployment(), params), PLAIN, policy_version("knative-kpa", params, {})
    )


def _tick_times(tick_s: float | None, policy_tick_s: float, ticks: int) -> list[tuple[float, float]]:
    """(when the tick was due, when the loop ran it) for ``ticks`` ticks of a real-time loop."""
    cluster = FakeCluster(2)
    c = controller(
        FollowingSource(cluster), cluster, primary=_knative(policy_tick_s), clock=WallClock(), tick_s=tick_s
    )
    times: list[tuple[float, float]] = []
    inner = c.tick

    def recording_tick(now_s: float):  # the loop's own call, with the clock's time
        times.append((c.state.next_tick_s, now_s))
        return inner(now_s)

    c.tick = recording_tick  # type: ignore[method-assign]
    t0 = time.monotonic()
    assert c.run(threading.Event(), max_ticks=ticks) == ticks
    assert time.monotonic() - t0 < 30.0
    return times


def _check_grid(times: list[tuple[float, float]], cadence_s: float) -> None:
    for k, (due, ran) in enumerate(times):
        assert ran >= due  # never before the time the core scheduled
        assert abs(due - (times[0][0] + cadence_s * k)) < 1e-9  # on the grid, late ticks or not
    # the whole run took the schedule's time, not the old loop's fixed 15 s per tick
    assert times[-1][1] - times[0][0] < 15.0


def test_the_loop_ticks_on_the_policys_cadence():
    _check_grid(_tick_times(None, 0.25, 4), 0.25)


def test_the_configurations_tick_overrides_the_policys():
    _check_grid(_tick_times(0.3, 60.0, 3), 0.3)  # not the policy's 60 s
