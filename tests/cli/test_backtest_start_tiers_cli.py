"""`llmscale backtest`'s start-tier and standby options, end to end through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_backtest_cli import run

# The flash-crowd preset's first 12 minutes at half rate: flat 30 req/s, x4 from minute 10.
CROWD = [
    "--workload",
    "flash-crowd",
    "--duration-s",
    "720",
    "--rate-scale",
    "0.5",
    "--policy",
    "slo",
    "--max-replicas",
    "24",
    "--initial-replicas",
    "3",
    "--no-oracle",
    "--jobs",
    "1",
]


def test_standby_pool_wakes_and_the_decision_log_names_the_tier(tmp_path: Path) -> None:
    out, log, report = tmp_path / "out.json", tmp_path / "d.jsonl", tmp_path / "r.html"
    p = run(
        "backtest",
        *CROWD,
        "--standby-replicas",
        "6",
        "--standby-curve",
        "0,6",
        "--json",
        str(out),
        "--decisions",
        str(log),
        "--report",
        str(report),
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    (row,) = doc["results"]
    assert doc["config"]["policy_params"]["slo"]["standby_replicas"] == 6
    assert doc["config"]["sim_wake_s"] == pytest.approx(1.64, abs=0.01)
    assert row["starts"]["sleeping"] >= 1
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    woken = [s for line in lines for s in line.get("starts", []) if s[1] == "sleeping"]
    assert len(woken) == row["starts"]["sleeping"]
    pools = [line["inputs"].get("standby_replicas") for line in lines if line["rule"] != "no-data"]
    assert pools and set(pools) == {6}
    # The curve: the run with pool 6 is the same run as the main one (same seed, same settings).
    curve = {c["standby_replicas"]: c for c in doc["standby_curve"]}
    assert sorted(curve) == [0, 6]
    assert curve[6]["slo_attainment"] == row["slo_attainment"] and curve[6]["gpu_hours"] == row["gpu_hours"]
    assert curve[0]["starts"]["sleeping"] == 0
    assert curve[6]["gpu_hours"] > curve[0]["gpu_hours"]  # the pool is charged while it sleeps
    assert 'id="chart-standby"' in report.read_text()


def test_tier_durations_reach_the_simulator(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    p = run(
        "backtest",
        *CROWD,
        "--duration-s",
        "60",
        "--cold-start-s",
        "200",
        "--warm-node-start-s",
        "40",
        "--wake-s",
        "3",
        "--node-keep-s",
        "600",
        "--json",
        str(out),
    )
    assert p.returncode == 0, p.stderr
    c = json.loads(out.read_text())["config"]
    assert c["sim_pending_s"] + c["sim_loading_s"] + c["sim_warmup_s"] == pytest.approx(200.0)
    total_warm = c["sim_warm_node_pending_s"] + c["sim_warm_node_loading_s"] + c["sim_warm_node_warmup_s"]
    assert total_warm == pytest.approx(40.0)
    assert (c["sim_wake_s"], c["sim_node_keep_s"]) == (3.0, 600.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--wake-s", "-1"], "--wake-s = -1", id="negative-wake"),
        pytest.param(["--node-keep-s", "nan"], "--node-keep-s = nan", id="nan-keep"),
        pytest.param(["--standby-curve", "0,x"], "'x' is not an integer", id="curve-not-int"),
        pytest.param(["--standby-curve", "-2"], "--standby-curve = -2", id="curve-negative"),
        pytest.param(["--standby-replicas", "-1"], "--standby-replicas = -1", id="negative-pool"),
    ],
)
def test_bad_values_exit_2(args: list[str], message: str) -> None:
    p = run("backtest", "--workload", "flash-crowd", "--duration-s", "60", "--no-oracle", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert message in p.stderr and "Traceback" not in p.stderr
