"""``llmscale run`` with ``metrics.scrape.workers``: it ticks on what its workers read, and stops
leaving no worker behind.

Real processes: ``llmscale emulate`` with two replicas, ``llmscale run`` (dry-run) scraping them
through two worker processes. The workers are the run's children (``python -m
llmscale.metrics._shards``); SIGTERM to the run alone (not its process group, so nothing but the
run itself stops them) must end it with exit 0 and take both workers with it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from e2e_procs import EmulateProcess, Proc, decision_lines, llmscale_command, write_config

from support.processes import children, command_line
from support.prometheus_server import free_port
from support.wait import wait_for

pytestmark = pytest.mark.slow


def _running_children(pid: int) -> dict[int, str]:
    """Child processes of ``pid`` still running -> their command lines."""
    return {p: cmd for p in children(pid) if (cmd := command_line(p))}


def test_run_with_scrape_workers_ticks_and_stops_leaving_no_process(workdir: Path, procs: Any) -> None:
    emulate = procs(EmulateProcess, workdir, "--replicas", "2", "--max-seconds", "150")
    front = emulate.wait_ready()
    static = [
        {"name": r["name"], "url": f"http://127.0.0.1:{r['port']}/metrics"} for r in emulate.ready_replicas()
    ]
    log_path = workdir / "decisions.jsonl"
    doc = {
        "target": {"name": "emulated-llama", "backend": "vllm"},
        "metrics": {"source": "scrape", "scrape": {"static_targets": static, "timeout_s": 3, "workers": 2}},
        "policy": {"name": "slo"},
        "guards": {"min_replicas": 1, "max_replicas": 4},
        "tick_s": 1.0,
        "mode": "dry-run",
        "actuator": {"kind": "emulate", "emulate": {"url": front}},
        "server": {"listen": f"127.0.0.1:{free_port()}"},
        "decision_log": {"path": str(log_path)},
    }
    config = write_config(workdir, doc)
    argv = [*llmscale_command(), "run", "--config", str(config), "--max-ticks", "200"]
    run = procs(Proc, "run", argv, workdir)

    def ticked() -> list[dict[str, Any]] | None:
        if not run.running():
            pytest.fail(f"llmscale run exited\n{run.tail()}")
        lines = decision_lines(log_path)
        return lines if len(lines) >= 3 and lines[-1]["unknown_replicas"] == 0 else None

    lines = wait_for("three ticks reading both replicas", ticked, 120, every_s=0.2, context=run.tail)
    assert lines[-1]["replicas"]["ready"] == 2, lines[-1]
    workers = {p: cmd for p, cmd in _running_children(run.pid).items() if "llmscale.metrics._shards" in cmd}
    assert len(workers) == 2, _running_children(run.pid)

    os.kill(run.pid, signal.SIGTERM)  # the run alone: its own shutdown must stop the workers
    assert run.wait(30.0) == 0, run.tail()
    left = [p for p in workers if os.path.exists(f"/proc/{p}")]
    assert not left, f"scrape workers left running: {left}\n{run.tail()}"
