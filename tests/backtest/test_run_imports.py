"""A backtest of one policy imports what that run needs, not every policy module or the MIG profiles.

Both imports were a fixed cost of every ``run_policy`` (README, "Simulator speed": 0.52e9 and
0.05e9 of the 3.80e9 instructions of benchmarks/sim_speed.py's run, measured with
benchmarks/sim_callgrind.py). Checked in a fresh interpreter: this test process has imported
everything already. The other side of each shortcut is checked too: a policy not imported yet is
still found, and a MIG slice is still billed as its share of a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

_CHILD = """
import json, sys
import numpy as np
from llmscale.backtest.runner import BacktestSettings, build_fleet, run_policy
from llmscale.workloads.model import Workload

w = Workload.from_arrays("tiny", np.arange(20) * 0.5, np.full(20, 200), np.full(20, 20))
s = BacktestSettings(model="llama-3-8b", gpu=sys.argv[1], tp=1, min_replicas=1, max_replicas=2,
                     initial_replicas=1, policy_params={"static": {"replicas": 1}})
r = run_policy(w, sys.argv[2], s)
print(json.dumps({
    "completed": r.summary["completed"],
    "gpus_per_replica": build_fleet(w, s, 1).gpus_per_replica,
    "policy_modules": sorted(m for m in sys.modules if m.startswith("llmscale.policies.")),
    "mig": "llmscale.perf.mig" in sys.modules,
}))
"""


def _run(gpu: str, policy: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, gpu, policy], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_static_on_a_whole_gpu_imports_no_other_policy_and_no_tenancy() -> None:
    r = _run("h100-80gb", "static")
    assert r["completed"] == 20
    assert r["gpus_per_replica"] == 1.0
    assert "llmscale.policies.static" in r["policy_modules"]  # type: ignore[operator]
    assert "llmscale.policies.slo" not in r["policy_modules"]  # type: ignore[operator]
    assert "llmscale.policies.knative" not in r["policy_modules"]  # type: ignore[operator]
    assert r["mig"] is False


def test_a_policy_not_imported_yet_is_found_and_a_mig_slice_is_billed_as_its_share() -> None:
    r = _run("h100-80gb:3g.40gb", "knative-kpa")
    assert r["completed"] == 20
    assert r["gpus_per_replica"] == 3 / 7
    assert "llmscale.policies.knative" in r["policy_modules"]  # type: ignore[operator]
    assert r["mig"] is True  # the MIG profiles (perf/mig.py) are read only for a slice
