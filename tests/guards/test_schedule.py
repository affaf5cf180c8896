"""The guards' schedule: replica bounds by cron windows, table-driven with worked times."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from llmscale.backtest.calendar import DEFAULT_START_UNIX_S, parse_start_at, run_start_unix_s
from llmscale.config import load_config
from llmscale.errors import ConfigError
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.schedules import ScheduleRule, parse_schedule, scheduled_bounds
from llmscale.types import Decision, FleetView, Signals

REPO = Path(__file__).resolve().parents[2]

OFFICE = ScheduleRule("30 7 * * 1-5", 11 * 3600.0, min_replicas=6, timezone="Europe/Berlin", name="office")
NIGHTS = ScheduleRule("0 22 * * *", 8 * 3600.0, max_replicas=8, name="nights")


def unix(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        # Tuesday 2026-03-03 08:00 in Berlin (07:00 UTC, CET): office hours opened at 07:30
        pytest.param("2026-03-03T07:00:00+00:00", (6, 20, ("office",)), id="tuesday-morning-berlin"),
        # 07:29 Berlin: not yet
        pytest.param("2026-03-03T06:29:00+00:00", (1, 20, ()), id="a-minute-before"),
        # exactly 07:30 Berlin: the opening minute counts
        pytest.param("2026-03-03T06:30:00+00:00", (6, 20, ("office",)), id="at-the-opening"),
        # 18:30 Berlin = 07:30 + 11 h: closed (the window is [open, open + duration))
        pytest.param("2026-03-03T17:30:00+00:00", (1, 20, ()), id="closes-after-duration"),
        # Saturday: the weekday field excludes it
        pytest.param("2026-03-07T08:00:00+00:00", (1, 20, ()), id="saturday"),
        # 23:00 UTC: nights (22:00 UTC + 8 h) cap the fleet
        pytest.param("2026-03-03T23:00:00+00:00", (1, 8, ("nights",)), id="night-ceiling"),
        # 05:59 UTC next day still in the window opened at 22:00 the evening before
        pytest.param("2026-03-04T05:59:00+00:00", (1, 8, ("nights",)), id="window-across-midnight"),
        # Summer time: office hours opened at 07:30 Berlin = 05:30 UTC in July; at 06:00 UTC the
        # nights window (22:00 + 8 h) has just closed
        pytest.param("2026-07-07T06:00:00+00:00", (6, 20, ("office",)), id="summer-time"),
        pytest.param("2026-07-07T05:59:00+00:00", (6, 8, ("office", "nights")), id="summer-time-overlap"),
    ],
)
def test_scheduled_bounds_at_worked_times(when, expected):
    assert scheduled_bounds((OFFICE, NIGHTS), 1, 20, unix(when)) == expected


def test_overlapping_rules_take_the_highest_floor_and_lowest_ceiling_and_never_cross():
    a = ScheduleRule("0 * * * *", 3600.0, min_replicas=4, max_replicas=12, name="a")
    b = ScheduleRule("0 * * * *", 3600.0, min_replicas=9, name="b")
    c = ScheduleRule("0 * * * *", 3600.0, max_replicas=6, name="c")
    t = unix("2026-03-03T10:15:00+00:00")
    assert scheduled_bounds((a, b), 1, 20, t) == (9, 12, ("a", "b"))
    # b's floor 9 above c's ceiling 6: more than the ceiling is never asked for
    assert scheduled_bounds((b, c), 1, 20, t) == (6, 6, ("b", "c"))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"cron": "61 7 * * *", "duration_s": 60, "min_replicas": 2}, "cron = '61 7 * * *'"),
        ({"cron": "0 7 * *", "duration_s": 60, "min_replicas": 2}, "must be five fields"),
        ({"cron": "0 7 * * *", "duration_s": 0, "min_replicas": 2}, "duration_s = 0"),
        ({"cron": "0 7 * * *", "duration_s": 8 * 86400, "min_replicas": 2}, "(a week)"),
        ({"cron": "0 7 * * *", "duration_s": 60}, "sets neither min_replicas nor max_replicas"),
        ({"cron": "0 7 * * *", "duration_s": 60, "min_replicas": 5, "max_replicas": 2}, "above max_replicas"),
        ({"cron": "0 7 * * *", "duration_s": 60, "min_replicas": -1}, "min_replicas = -1"),
        ({"cron": "0 7 * * *", "duration_s": 60, "min_replicas": 2.5}, "min_replicas = 2.5"),
        (
            {"cron": "0 7 * * *", "duration_s": 60, "min_replicas": 2, "timezone": "Mars/Olympus"},
            "Mars/Olympus",
        ),
        ({"cron": "0 7 * * *", "duration_s": 60, "min_replicas": 2, "tz": "UTC"}, "unknown key(s) ['tz']"),
        ({"duration_s": 60, "min_replicas": 2}, "missing cron"),
        ("0 7 * * *", "must be a mapping"),
    ],
)
def test_a_bad_rule_is_refused_naming_its_place(raw, message):
    with pytest.raises(ConfigError) as err:
        parse_schedule([{"cron": "0 6 * * *", "duration_s": 60, "min_replicas": 1}, raw])
    assert str(err.value).startswith("guards.schedule[1]: ") and message in str(err.value), err.value


def test_the_guards_hold_the_floor_and_ceiling_of_the_open_window():
    cfg = GuardConfig(min_replicas=1, max_replicas=20, headroom_max_usage=None, drain_aware=False)
    rule = {"cron": "0 8 * * *", "duration_s": 3600, "min_replicas": 6, "name": "peak"}
    cfg = cfg.merged({"schedule": [rule]})
    assert cfg.schedule == (ScheduleRule("0 8 * * *", 3600, min_replicas=6, name="peak"),)
    signals = Signals(time_s=0.0, fleet=FleetView(spec_replicas=3, ready=3), values={})
    decision = Decision(3, "policy")
    t_in = unix("2026-03-03T08:10:00+00:00")
    out, _ = apply_guards(decision, signals, cfg, GuardState(), t_in)
    assert (out.desired, out.guard) == (6, "schedule") and "schedule peak" in out.note
    # the same time on a backtest's time line that starts at 08:00 UTC that day
    epoch = unix("2026-03-03T08:00:00+00:00")
    out2, _ = apply_guards(decision, signals, cfg, GuardState(), t_in - epoch, epoch)
    assert (out2.desired, out2.guard) == (6, "schedule")
    out3, _ = apply_guards(decision, signals, cfg, GuardState(), unix("2026-03-03T09:00:00+00:00"))
    assert (out3.desired, out3.guard) == (3, None)  # closed at 09:00: the policy's 3 stands


def test_the_run_config_takes_a_schedule_and_names_a_bad_rule(tmp_path):
    doc = {
        "target": {"namespace": "llm", "name": "llama", "selector": {"app": "llama"}},
        "metrics": {"source": "prometheus", "prometheus": {"url": "http://prom:9090"}},
        "policy": {"name": "static", "params": {"replicas": 3}},
        "guards": {
            "max_replicas": 10,
            "schedule": [{"cron": "30 7 * * 1-5", "duration_s": 39600, "min_replicas": 4}],
        },
        "mode": "apply",
    }
    p = tmp_path / "llmscale.yaml"
    p.write_text(yaml.safe_dump(doc))
    cfg = load_config(p)
    guards = GuardConfig().merged(cfg.guard_overrides())
    assert guards.schedule == (ScheduleRule("30 7 * * 1-5", 39600, min_replicas=4),)
    doc["guards"]["schedule"][0]["min_replicas"] = 40
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(err.value).startswith("llmscale.yaml: guards: "), err.value
    assert "min_replicas = 40 above max_replicas = 10" in str(err.value), err.value
    doc["guards"]["schedule"][0]["cron"] = "every morning"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(err.value).startswith("llmscale.yaml: guards: guards.schedule[0]: "), err.value
    assert "cron = 'every morning'" in str(err.value)


@pytest.mark.parametrize(
    ("meta", "start_at", "window_s", "expected"),
    [
        ({}, None, 0.0, DEFAULT_START_UNIX_S),
        # an Azure trace's first timestamp (7 fractional digits), a window starting 60 s in
        (
            {"start_timestamp": "2023-11-16 18:17:03.9799600"},
            None,
            60.0,
            unix("2023-11-16T18:18:03.979960+00:00"),
        ),
        ({"start_timestamp": "1700000000.5"}, None, 0.0, 1700000000.5),
        (
            {"start_timestamp": "2023-11-16 18:17:03"},
            "2026-03-02T07:00:00+01:00",
            0.0,
            unix("2026-03-02T06:00:00+00:00"),
        ),
    ],
)
def test_the_run_start_on_the_calendar(meta, start_at, window_s, expected):
    assert run_start_unix_s(meta, start_at, window_s) == pytest.approx(expected)
    assert datetime.fromtimestamp(DEFAULT_START_UNIX_S, UTC).strftime("%A %H:%M") == "Monday 00:00"


def test_a_bad_start_at_is_refused():
    with pytest.raises(ConfigError, match="not an ISO 8601 date-time"):
        parse_start_at("next tuesday")


def test_a_backtest_holds_the_scheduled_floor_in_its_window(tmp_path):
    """The default preset's first 30 minutes (from the default Monday 00:00 UTC) under `slo` with a
    floor of 7 from 00:10 to 00:20: every tick in the window decides at least 7, under the guard
    `schedule`; before the window no tick does, and after it the floor is gone."""
    policy_config = tmp_path / "policies.yaml"
    rule = {"cron": "10 0 * * 1", "duration_s": 600, "min_replicas": 7, "name": "monday-floor"}
    policy_config.write_text(yaml.safe_dump({"slo": {"guards": {"schedule": [rule]}}}))
    decisions = tmp_path / "decisions.jsonl"
    args = ["backtest", "--policy", "slo", "--duration-s", "1800", "--no-oracle", "--max-replicas", "10",
            "--policy-config", str(policy_config), "--decisions", str(decisions)]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *args], capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    ticks = [json.loads(line) for line in decisions.read_text().splitlines()]
    ticks = [t for t in ticks if "desired" in t and t.get("policy") == "slo"]
    inside = [t for t in ticks if 600 <= t["time_s"] < 1200]
    before = [t for t in ticks if t["time_s"] < 600]
    assert inside and before
    assert all(t["desired"] >= 7 for t in inside), [(t["time_s"], t["desired"]) for t in inside]
    assert any(t["guard"] == "schedule" for t in inside)
    assert not any(t["guard"] == "schedule" for t in ticks if not 600 <= t["time_s"] < 1200)
    assert max(t["desired"] for t in before) < 7  # the floor is the schedule's, not the load's
