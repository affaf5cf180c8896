"""`analyze` / `diagnose` over a live range: a real Prometheus scraping a page whose values the test sets."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from llmscale.analyze.diagnose import diagnose_table
from llmscale.analyze.prometheus import read_prometheus_range
from support.prometheus_server import TargetGroup


def _page(ghosts: int, waiting: int) -> str:
    # the controller's own gauges (controller/server.py) and two vLLM replicas' queue gauges
    return (
        "# TYPE llmscale_signal_value gauge\n"
        f'llmscale_signal_value{{signal="ghost_replicas"}} {ghosts}\n'
        'llmscale_signal_value{signal="tenant_drift"} 0.05\n'
        "# TYPE llmscale_spec_replicas gauge\n"
        'llmscale_spec_replicas{target="default/llm"} 4\n'
        "# TYPE llmscale_desired_replicas gauge\n"
        'llmscale_desired_replicas{target="default/llm",policy="slo"} 4\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{replica="a"}} {waiting}\n'
        'vllm:num_requests_waiting{replica="b"} 1\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{replica="a"} 8\n'
        'vllm:num_requests_running{replica="b"} 8\n'
    )


def test_ghost_episode_read_back_from_prometheus(page_server, prometheus_server):
    page_server.set("/metrics", _page(0, 3))
    prom = prometheus_server(static_targets=[TargetGroup([f"127.0.0.1:{page_server.port}"])])
    sel = 'llmscale_signal_value{signal="ghost_replicas"}'

    def scraped(value: float, since_s: float):
        # the newest sample has this value and was scraped after ``since_s``
        return lambda r: bool(r) and float(r[0]["value"][1]) >= since_s and _last(prom, sel) == value

    start = time.time()
    prom.wait_for(f"timestamp({sel})", scraped(0.0, start + 3))
    t_ghost = time.time()
    page_server.set("/metrics", _page(2, 5))
    prom.wait_for(f"timestamp({sel})", scraped(2.0, t_ghost + 6))
    t_back = time.time()
    page_server.set("/metrics", _page(0, 3))
    prom.wait_for(f"timestamp({sel})", scraped(0.0, t_back + 3))
    end = time.time()

    table = read_prometheus_range(prom.url, start_s=start, end_s=end, step_s=1.0)
    assert table.policy == "live" and len(table) >= 10
    assert table.spec.max() == 4.0 and table.serving().max() == 2.0  # two replicas report running
    waiting = table.quantity("queue_waiting")
    assert waiting is not None and set(waiting[np.isfinite(waiting)].tolist()) == {4.0, 6.0}
    findings, unchecked = diagnose_table(table)
    ghosts = [f for f in findings if f.kind == "ghost replicas"]
    assert len(ghosts) == 1 and ghosts[0].peak == 2.0
    # the episode lies between the page changes (to within a scrape and a step either side)
    assert t_ghost - 2 <= ghosts[0].start_s and ghosts[0].end_s <= t_back + 3
    assert ghosts[0].num_ticks >= 5
    assert not [f for f in findings if f.kind == "tenant drift"]
    assert "model drift (itl): no model_drift_itl_ratio in the log" in unchecked
    # the same through the command line
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "COLUMNS": "200"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmscale.cli",
            "diagnose",
            "--prometheus",
            prom.url,
            "--start",
            str(start),
            "--end",
            str(end),
            "--step-s",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert [line for line in out.stdout.splitlines() if "ghost replicas" in line and "replica-hours" in line]


def _last(prom, expr: str) -> float | None:
    r = prom.query(expr)
    return float(r[0]["value"][1]) if r else None
