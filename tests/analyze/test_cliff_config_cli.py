"""End to end: a backtest writes decisions, ``analyze --policy-config-out`` writes the P99 knee as
the capacity-model policies' cliff, and a backtest with ``--policy-config`` plans with it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import yaml

from llmscale.policies.config_file import load_policy_config

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "LLMSCALE_PURE_PYTHON": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_backtest_analyze_backtest(tmp_path):
    # Two static replicas under the default preset's first 20 minutes, whose ramp takes each from
    # ~12 req/s past what one holds (~13.5): the P99 turns up inside the log.
    sweep = tmp_path / "static.jsonl"
    run = _cli(
        "backtest", "--policy", "static", "--replicas", "2", "--duration-s", "1200", "--no-oracle",
        "--decisions", str(sweep),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    cliff_file = tmp_path / "cliff.yaml"
    out = _cli("analyze", str(sweep), "--policy-config-out", str(cliff_file))
    assert out.returncode == 0, out.stderr
    doc = load_policy_config(cliff_file)  # what backtest and run load
    assert set(doc) == {"slo", "capacity-calibrated"}
    cliff = doc["slo"]["cliff_rps_per_replica"]
    assert doc["capacity-calibrated"] == {"cliff_rps_per_replica": cliff}
    assert f"cliff_rps_per_replica {cliff:.4g}" in out.stdout
    assert f"P99 latency turns up at {cliff:.3g} req/s per serving replica" in out.stdout
    assert 5.0 < cliff < 25.0  # one Llama-3-8B H100 replica holds ~13.5 req/s of this mix
    assert yaml.safe_load(cliff_file.read_text())["slo"]["cliff_rps_per_replica"] == cliff

    decisions = tmp_path / "slo.jsonl"
    run = _cli(
        "backtest", "--policy", "slo", "--duration-s", "600", "--no-oracle",
        "--policy-config", str(cliff_file), "--decisions", str(decisions),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    planned = [d for d in lines if d["rule"] != "no-data"]
    assert len(planned) >= 30
    for d in planned:
        inputs = d["inputs"]
        assert inputs["cliff_rps_per_replica"] == cliff and inputs["cliff_margin"] == 0.9
        floor = max(1, math.ceil(inputs["forecast_rps"] / (0.9 * cliff) - 1e-9))
        assert inputs["cliff_floor_replicas"] == floor
        assert d["desired_before_guards"] >= min(floor, 64), d  # the backtest's max_replicas


def test_no_knee_no_file(tmp_path):
    """A log whose P99 never bends (a flat load) has no cliff to write: an error naming the option."""
    log = tmp_path / "flat.jsonl"
    line = {"time_s": 15.0, "policy": "static", "replicas": {"spec": 2, "ready": 2}, "desired": 2}
    log.write_text(json.dumps(line) + "\n")
    out = _cli("analyze", str(log), "--policy-config-out", str(tmp_path / "cliff.yaml"))
    assert out.returncode != 0
    assert "--policy-config-out" in out.stderr + out.stdout
    assert not (tmp_path / "cliff.yaml").exists()
