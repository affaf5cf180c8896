"""The backtest's node pool: node-pending time in the results, the JSON and the HTML report.

Ten minutes of the ``default`` preset from one replica, so ``keda-queue`` scales up at once: with
a pool of 3 nodes that take 120 s each, its first starts wait for their nodes and the rest for a
node to free. Without the pool options the results carry no trace of the pool (the decision
logs are pinned byte for byte by test_decision_log_identity.py).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from llmscale.backtest.compare import build_document
from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.report import build_figures, render_report
from llmscale.report.figures import CHART_LOAD
from llmscale.workloads import make_preset, window

POLICY = "keda-queue"


@pytest.fixture(scope="module")
def runs():
    workload = window(make_preset("default", seed=0), 0.0, 600.0)
    base = BacktestSettings(min_replicas=1, max_replicas=8, initial_replicas=1).with_cold_start()
    pool = replace(base, sim=replace(base.sim, node_start_s=120.0, max_nodes=3))
    return {
        name: (workload, settings, run_policy(workload, POLICY, settings))
        for name, settings in (("none", base), ("pool", pool))
    }


def test_node_pending_time_is_reported_per_policy(runs) -> None:
    _, settings, result = runs["pool"]
    summary, series = result.summary, result.series
    waiting = series["replicas_node_pending"]
    assert max(waiting) > 0
    # Every start waited: 2 provisioned nodes (the pool holds 3, one runs the initial replica) at
    # 120 s each at least, and any start beyond them for a node to free.
    assert summary["node_pending_replica_s"] >= 2 * 120.0
    # The series samples every step_s: its sum is the same time, within a step per replica start.
    step_s = series["t_s"][1] - series["t_s"][0]
    sampled_s = sum(waiting) * step_s
    assert abs(sampled_s - summary["node_pending_replica_s"]) <= step_s * (
        1 + sum(summary["starts"].values())
    )
    # Replicas waiting for a node are part of the fleet the policy holds.
    assert summary["replicas_max"] >= max(waiting)
    assert settings.sim.node_pool


def test_the_pool_waits_cost_serving_time(runs) -> None:
    _, _, without = runs["none"]
    _, _, with_pool = runs["pool"]
    assert "node_pending_replica_s" not in without.summary
    assert "replicas_node_pending" not in without.series
    # The same policy, its starts later by the node wait: the fleet serves less of the same load.
    assert with_pool.summary["slo_attainment"] <= without.summary["slo_attainment"]


def test_the_json_and_the_report_show_node_pending(runs, tmp_path: Path) -> None:
    docs = {
        name: build_document(workload, settings, [result], None, with_series=True)
        for name, (workload, settings, result) in runs.items()
    }
    config = docs["pool"]["config"]
    assert (config["sim_node_start_s"], config["sim_max_nodes"]) == (120.0, 3)
    assert not {"sim_node_start_s", "sim_max_nodes"} & set(docs["none"]["config"])
    assert docs["pool"]["results"][0]["node_pending_replica_s"] > 0

    pages = {
        name: render_report(doc, tmp_path / f"{name}.html").read_text("utf-8") for name, doc in docs.items()
    }
    table = re.search(r'<table id="comparison-table".*?</table>', pages["pool"], re.S)
    assert table and "Node<br>pending s" in table.group(0)
    assert "Node<br>pending s" not in pages["none"]
    # The replicas chart stacks the state, and only when a result has it.
    states = {name: {t.name for t in build_figures(doc)[CHART_LOAD].data} for name, doc in docs.items()}
    assert "node pending" in states["pool"]
    assert states["pool"] - states["none"] == {"node pending"}
