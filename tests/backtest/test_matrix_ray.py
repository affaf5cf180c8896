"""The workload matrix on a Ray cluster (``benchmarks/policies.py --matrix --ray ADDRESS``): every
(cell, policy) job a task, with the results of a local run.

A local Ray instance (``support/ray_local.py``) stands for the cluster. Two matrix cells, shortened
to 4 simulated minutes, under two policies with the oracle and the causal reference, run twice as
separate processes: once in local worker processes, once with ``--ray``. The per-cell results
(every policy's summary row, the oracle's and the reference's) must be identical, since each job
is the same deterministic simulation wherever it runs, and two cells in one pool must not mix up
whose result is whose (the cells differ in every figure).
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

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CELLS = ("chat/step", "code/ramp")


def _matrix(shared_data: Path, out: Path, *extra: str) -> tuple[dict[str, Any], str]:
    args = [
        str(REPO / "benchmarks" / "policies.py"), "--matrix", "--deploy", "h100-8b",
        *[a for c in CELLS for a in ("--cell", c)], "--policy", "slo,keda-queue",
        "--duration-s", "240", "--json", str(out), *extra,
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "LLMSCALE_SHARED_DATA": str(shared_data),
        **LOOPBACK_ONLY,
    }
    run = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600)
    # exit 1 is the matrix's verdict (a cell whose acceptance is not met), not a failure to run
    assert run.returncode in (0, 1), run.stderr[-4000:]
    assert "matrix (" in run.stdout, run.stdout[-2000:]
    return json.loads(out.read_text()), run.stderr


def _results(doc: Any) -> Any:
    """``doc`` without the wall-clock seconds each run took (``wall_s``), which are the machine's."""
    if isinstance(doc, dict):
        return {k: _results(v) for k, v in doc.items() if k != "wall_s"}
    if isinstance(doc, list):
        return [_results(v) for v in doc]
    return doc


def test_matrix_on_ray_gives_the_local_results(ray_cluster, shared_data, tmp_path):
    local, local_err = _matrix(shared_data, tmp_path / "local.json", "--jobs", "2")
    on_ray, ray_err = _matrix(shared_data, tmp_path / "ray.json", "--ray", ray_cluster["address"])

    keys = [f"h100-8b {c}" for c in CELLS]
    assert sorted(local) == sorted(keys), sorted(local)
    for doc in (local, on_ray):
        for key in keys:
            names = {row["policy"] for row in doc[key]}
            assert {"slo", "keda-queue", "oracle"} <= names, (key, names)
    # the two cells are different workloads: were their results swapped or shared, this shows it
    assert _results(local[keys[0]]) != _results(local[keys[1]])
    assert _results(on_ray) == _results(local)
    # every job reported once it finished, under its cell's name: 2 cells x (2 policies + oracle)
    for err in (local_err, ray_err):
        done = [ln for ln in err.splitlines() if ln.startswith("[")]
        assert len(done) == 6 and done[-1].startswith("[6/6]"), err[-2000:]
        assert sum("code/ramp" in ln for ln in done) == 3, done
