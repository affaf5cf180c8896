"""`llmscale backtest --ray ADDRESS`: every (policy, seed) job a task on a Ray cluster, with the
results of a local run.

A local Ray instance (``support/ray_local.py``) stands for the cluster. The same backtest (two
policies and the oracle, two seeds) runs twice as separate processes, once in local worker
processes and once with ``--ray``; the JSON documents and the decision logs must be identical,
since a job runs the same deterministic simulation wherever it runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.ray_local import LOOPBACK_ONLY

pytest.importorskip("ray", reason="needs ray (the test extra): pip install -e '.[test]'")

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _backtest(out: Path, *extra: str) -> tuple[dict, list[str], str]:
    args = [
        "backtest", "--workload", "azure-like", "--duration-s", "900", "--rate-scale", "0.3",
        "--policy", "slo", "--policy", "keda-queue", "--seeds", "2",
        "--json", str(out / "result.json"), "--decisions", str(out / "decisions.jsonl"), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": SRC, **LOOPBACK_ONLY}
    run = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    doc = json.loads((out / "result.json").read_text())
    return doc, (out / "decisions.jsonl").read_text().splitlines(), run.stdout


def _results(doc: Any) -> Any:
    """``doc`` without the wall-clock seconds each run took (``wall_s``), which are the machine's."""
    if isinstance(doc, dict):
        return {k: _results(v) for k, v in doc.items() if k != "wall_s"}
    if isinstance(doc, list):
        return [_results(v) for v in doc]
    return doc


def test_backtest_on_ray_writes_what_a_local_run_writes(ray_cluster, tmp_path):
    assert ray_cluster["address"].startswith("127.0.0.1:"), ray_cluster
    (tmp_path / "local").mkdir()
    (tmp_path / "ray").mkdir()
    local_doc, local_lines, local_out = _backtest(tmp_path / "local", "--jobs", "2")
    ray_doc, ray_lines, ray_out = _backtest(tmp_path / "ray", "--ray", ray_cluster["address"])
    assert [r["policy"] for r in ray_doc["results"]] == ["slo", "keda-queue"]
    assert ray_doc["oracle"] is not None and ray_doc["oracle"]["gpu_hours"] > 0
    assert _results(ray_doc) == _results(local_doc)
    assert len(ray_lines) > 10 and ray_lines == local_lines
    # the table printed, but for where the files went
    assert ray_out.replace(str(tmp_path / "ray"), "OUT") == local_out.replace(str(tmp_path / "local"), "OUT")


def test_backtest_refuses_a_ray_address_nothing_listens_on(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {**os.environ, "PYTHONPATH": SRC}
    args = ["backtest", "--workload", "azure-like", "--duration-s", "300", "--policy", "slo",
            "--ray", f"127.0.0.1:{port}"]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert f"--ray 127.0.0.1:{port}: cannot reach a Ray cluster" in run.stderr, run.stderr[-2000:]
