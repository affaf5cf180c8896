"""The live controller and the backtest decide alike: same trace, same decision log, line for line.

The backtest (``backtest/runner.py``'s ``run_policy``) and the live controller
(``controller/live.py``'s ``LiveController``) both drive the controller core; every step that
shapes a decision (policy, guards, the outage hold, admission, the standby target) is the core's,
and the adapters only observe and actuate. Here the live controller runs on a ManualClock over a
simulated fleet, through the same metric source the backtest reads (``SimMetricSource``) and a
Cluster over the same fleet (``cluster/sim.py``'s ``SimCluster``), with the fleet advanced to the
same stops as the backtest's loop. Both write a decision log; every line's decision fields
(:data:`DECISION_FIELDS`: the fleet, the proposal and the final count, the rule and its numbers,
the guard, whether it scaled, the fleet state and the standby pool) must be equal, line for line.
Wall-clock fields (trace id, ``ts``, tick duration) and the backtest's ``starts`` (which start
tier each new replica took: an observation of the fleet, not a decision) are left out.

A step added to one adapter only breaks the equality:
:func:`test_a_step_added_to_one_adapter_only_is_caught` adds one (a scale-up held at the spec for
a tick) to the live loop, then to the backtest, checks it fired, and that the comparison names
the first line it changed.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import llmscale.backtest.runner as runner
import llmscale.controller.live as live_module
from llmscale.analyze.log import read_decision_log
from llmscale.backtest.runner import (
    BacktestSettings,
    SeriesRecorder,
    build_fleet,
    run_policy,
    series_step_for,
)
from llmscale.clock import ManualClock
from llmscale.cluster.sim import SimCluster
from llmscale.controller.core import Controller
from llmscale.controller.decision_log import DecisionLog
from llmscale.controller.live import LiveController, PolicyRun
from llmscale.controller.server import ControllerMetrics
from llmscale.deployment import guard_config
from llmscale.policies.base import create_policy
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.sub_tick import QUEUE_SAMPLE_PERIOD_S
from llmscale.types import Mode
from llmscale.workloads import make_preset, window
from llmscale.workloads.model import Workload

#: what a decision line says about the decision (both logs write it with TickRecord.as_json)
DECISION_FIELDS = (
    "time_s",
    "policy",
    "replicas",
    "desired_before_guards",
    "desired",
    "rule",
    "inputs",
    "note",
    "guard",
    "guard_note",
    "applied",
    "fleet_state",
    "observed",
    "standby",
)

#: slo with a fixed standby pool of 2 (the live loop keeps it through StandbyCapable), and two
#: policies of other families (a per-pod concurrency target, a queue-length trigger)
POLICIES = {
    "slo": {"standby_replicas": 2},
    "knative-kpa": {},
    "keda-queue": {},
}


@pytest.fixture(scope="module")
def workload() -> Workload:
    # 5 minutes of the default preset (40 req/s from 2 replicas): every policy here scales up
    return window(make_preset("default", seed=0), 0.0, 300.0)


def _settings(name: str) -> BacktestSettings:
    base = BacktestSettings(min_replicas=1, max_replicas=16, initial_replicas=2).with_cold_start()
    return replace(base, policy_params={name: dict(POLICIES[name])})


def backtest_lines(workload: Workload, name: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    run_policy(workload, name, _settings(name), decisions_out=out)
    return [json.loads(ln) for ln in out.getvalue().splitlines()]


def live_lines(workload: Workload, name: str) -> list[dict[str, Any]]:
    """The live controller over a simulated fleet, stopped where ``run_policy`` stops the fleet:
    at each tick the core schedules, each queue sample (every second) and each series sample."""
    settings = _settings(name)
    params = dict(settings.policy_params.get(name) or {})
    guard_params = params.pop("guards", None) or {}
    deployment = settings.deployment()
    policy = create_policy(name, deployment, params)
    guards = guard_config(deployment, policy, guard_params)
    fleet = build_fleet(workload, settings, settings.initial_replicas)
    source = SimMetricSource(fleet, sub_tick=True)
    out = io.StringIO()
    cadence_s = Controller(policy, guards).cadence_s
    controller = LiveController(
        source=source,
        cluster=SimCluster(fleet),
        primary=PolicyRun(policy, guards, f"{name}:parity"),
        mode=Mode.APPLY,
        target="sim/parity",
        metrics=ControllerMetrics("sim/parity", "sim"),
        clock=ManualClock(cadence_s),  # the backtest's first tick is one cadence in
        timer=ManualClock(),
        decision_log=DecisionLog("-", stream=out),
        deployment=deployment,
    )
    step_s = series_step_for(workload.duration_s)
    recorder = SeriesRecorder(fleet, step_s)
    next_tick, next_sample, next_queue = controller.state.next_tick_s, step_s, QUEUE_SAMPLE_PERIOD_S
    horizon = float(workload.arrival_s[-1]) + settings.drain_horizon_s
    while True:
        t = min(next_tick, next_sample, next_queue)
        fleet.run_until(t)
        if t >= next_queue:
            source.sample_queue(t)
            next_queue += QUEUE_SAMPLE_PERIOD_S
            if t < next_sample and t < next_tick:
                continue
        if t >= next_sample:
            recorder.sample(t)
            next_sample += step_s
        if t >= next_tick:
            assert controller.tick(t) is not None, controller.last_failure
            next_tick = controller.state.next_tick_s
        if (fleet.arrivals_done and fleet.unresolved == 0) or t > horizon:
            break
    return [json.loads(ln) for ln in out.getvalue().splitlines()]


def differences(backtest: list[dict[str, Any]], live: list[dict[str, Any]]) -> list[str]:
    """Each line whose decision fields differ, with the first few fields that do (empty: equal)."""
    found = []
    if len(backtest) != len(live):
        found.append(f"{len(backtest)} backtest lines, {len(live)} live lines")
    for i, (b, lv) in enumerate(zip(backtest, live, strict=False)):
        diff = [f"{k}: {b.get(k)!r} != {lv.get(k)!r}" for k in DECISION_FIELDS if b.get(k) != lv.get(k)]
        if diff:
            found.append(f"line {i + 1} (t = {b.get('time_s')}): " + "; ".join(diff[:3]))
    return found


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_the_live_controller_writes_the_backtests_decision_log(workload, name, tmp_path):
    backtest = backtest_lines(workload, name)
    live = live_lines(workload, name)
    # one format, one reader: llmscale analyze reads the same table from either log
    tables = []
    for which, lines in (("backtest", backtest), ("live", live)):
        path = tmp_path / f"{which}.jsonl"
        path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
        tables.append(read_decision_log(path))
    b, lv = tables
    for col in ("time_s", "spec", "ready", "final"):
        np.testing.assert_array_equal(getattr(b, col), getattr(lv, col))
    assert b.signals.keys() == lv.signals.keys() and b.resolved == lv.resolved
    for k, v in b.signals.items():
        np.testing.assert_array_equal(v, lv.signals[k], err_msg=k)
    assert len(backtest) >= 10  # dozens of ticks: the shortest cadence here is slo's and keda's
    assert any(ln["applied"] for ln in backtest)  # decisions that acted, not only holds
    if name == "slo":
        assert all(ln.get("standby") == 2 for ln in backtest if ln["rule"] != "no-data")
    assert differences(backtest, live) == []


def _hold_scale_ups_once(decide: Callable[..., Any], fired: list[float]) -> Callable[..., Any]:
    """``decide`` with one more step: the first scale-up is held at the spec for a tick."""

    def step(record: Any) -> Any:
        if not fired and record.final > record.fleet.spec_replicas:
            fired.append(record.time_s)
            return replace(record, final=record.fleet.spec_replicas, guard="extra-step")
        return record

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = decide(*args, **kwargs)
        if isinstance(out[0], tuple | list):  # not a record pair
            return out
        return (step(out[0]), *out[1:])

    return wrapped


@pytest.mark.parametrize("where", ["live", "backtest"])
def test_a_step_added_to_one_adapter_only_is_caught(workload, monkeypatch, where):
    """The comparison is not vacuous: a step in one adapter only (here a scale-up held for one
    tick, as the live loop's outage and node holds once were) changes that adapter's lines, and
    :func:`differences` names the tick it fired at."""
    name = "knative-kpa"
    fired: list[float] = []
    if where == "live":
        monkeypatch.setattr(live_module, "decide", _hold_scale_ups_once(live_module.decide, fired))
    else:
        monkeypatch.setattr(runner, "tick", _hold_scale_ups_once(runner.tick, fired))
    backtest = backtest_lines(workload, name)
    live = live_lines(workload, name)
    assert len(fired) == 1 and math.isfinite(fired[0])
    found = differences(backtest, live)
    assert found, "a step in one adapter only went unnoticed"
    assert f"(t = {fired[0]})" in found[0] or f"(t = {round(fired[0], 3)})" in found[0], found[:2]
