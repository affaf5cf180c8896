"""`diagnose`: ghost-replica and drift episodes from a decision log."""

from __future__ import annotations

import pytest
from _logs import backtest_line, write_log

from llmscale.analyze.diagnose import TENANT_DRIFT_WARN, diagnose_table
from llmscale.analyze.log import read_decision_log
from llmscale.signals.diagnostics import coefficient_of_variation


def _log(tmp_path, ghosts, drift):
    lines = [
        backtest_line(15.0 * (i + 1), spec=4, final=4, observed={"ghost_replicas": g, "tenant_drift": d})
        for i, (g, d) in enumerate(zip(ghosts, drift, strict=True))
    ]
    return read_decision_log(write_log(tmp_path / "d.jsonl", lines))


def test_ghost_and_drift_episodes(tmp_path):
    ghosts = [0, 0, 2, 2, 1, 0, None, 1, 1, 0]
    drift = [0.1, 0.3, 0.4, 0.5, 0.35, 0.3, 0.1, 0.1, 0.26, 0.1]
    findings, unchecked = diagnose_table(_log(tmp_path, ghosts, drift), min_duration_s=60.0)
    ghost = [f for f in findings if f.kind == "ghost replicas"]
    # ticks at 45, 60, 75 s (2, 2, 1 ghosts): 5 replica-ticks x 15 s = 75 replica-seconds = 0.0208 h;
    # a tick without the number ends an episode, so 105-120 s is a second one
    assert [(f.start_s, f.end_s, f.num_ticks, f.peak) for f in ghost] == [
        (45.0, 90.0, 3, 2.0),
        (120.0, 150.0, 2, 1.0),
    ]
    assert "0.0208 replica-hours" in ghost[0].detail
    drifts = [f for f in findings if f.kind == "tenant drift"]
    # 30..90 s above 0.25 (5 ticks, 75 s >= 60 s) is a finding; 135 s alone (15 s) is too short
    assert [(f.start_s, f.end_s, f.peak) for f in drifts] == [(30.0, 105.0, 0.5)]
    assert [u.split(":")[0] for u in unchecked] == ["model drift (itl)", "model drift (ttft)"]


def test_tenant_drift_threshold_worked_example():
    # four replicas, one needing 2x the utilisation per request of the others: CV 0.35, a finding;
    # 1.5x: CV 0.19, not one (the numbers of diagnose.py's docstring)
    assert coefficient_of_variation([1, 1, 1, 2]) == pytest.approx(0.433 / 1.25, abs=1e-3)
    assert (
        coefficient_of_variation([1, 1, 1, 2]) > TENANT_DRIFT_WARN > coefficient_of_variation([1, 1, 1, 1.5])
    )


def test_model_drift_from_the_live_log(tmp_path):
    # llmscale run's lines: numbers under "signals", ratios under "drift"
    import json

    lines = [
        {
            "ts_unix": 1000.0 + 15 * i,
            "trace_id": f"t{i}",
            "policy": "slo",
            "replicas": {"spec": 2, "ready": 2},
            "final": 2,
            "signals": {"ttft_p99_s": 0.3},
            "drift": {"itl": {"ratio": r}, "ttft": {"ratio": 1.0}},
            "error": None,
        }
        for i, r in enumerate([1.0, 1.4, 1.45, 1.42, 1.41, 1.39, 1.0])
    ]
    p = tmp_path / "live.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    findings, unchecked = diagnose_table(read_decision_log(p))
    assert [(f.kind, f.start_s, f.end_s, f.peak) for f in findings] == [
        ("model drift (itl)", 1015.0, 1090.0, 1.45)
    ]
    assert "ghost replicas: no ghost_replicas in the log" in unchecked
