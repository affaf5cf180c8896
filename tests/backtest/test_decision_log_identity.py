"""The backtest's decision logs are pinned byte for byte across the controller-core refactor.

Each digest below is the SHA-256 of one policy's decision log (one JSON line per tick) over the
first 10 minutes of the ``default`` preset, computed by running this very file against the code
*before* the refactor (main at 662c52c, with ``PYTHONPATH`` pointing at its sources). A refactor
of the tick (``controller/core.py``), of the deployment value or of the guard merge must leave
every line as it was; an intended change of behaviour updates a digest here and says why in the
commit. The fuller comparison (every policy, 15 minutes of the preset and the Azure conversation
trace x20) is a script, not a test: it takes minutes.
"""

from __future__ import annotations

import hashlib
import io

import pytest

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.workloads import make_preset, window

#: policy -> SHA-256 of its decision log, from the pre-refactor code (see the module docstring),
#: updated once since, on purpose: a run writing a decision log samples seed 004's signals at their
#: own resolution (sim/sub_tick.py), so every line's ``observed.bw_saturation_p95`` and
#: ``observed.queue_entropy`` are the P95 of 600 100 ms samples and the entropy of 30 one-second
#: queue lengths; every other field of every line is as before (compared line by line against
#: main at 340a408: 9 policies, 10 minutes of the preset)
GOLDEN: dict[str, str] = {
    "slo": "9b97811f4519b427ee540d1309f18440facbe607131c518b73cae1607ea21327",
    "static": "9c5d68d48a719ae7d0c9e0a28dcc2a5c16d746beff144390a63de6d1f90b8497",
    "knative-kpa": "b0513bfa5b7146156bda038dc58464c920c0366539ed3777866c83e972ff8f68",
    "dynamo-sla": "2d28477fca8e79afa322663d75fb963fc1f05a99818666248bd5ca542b229c15",
    "three-layer": "5f7bb6d45f298fe7c642faaf8a96aaf901f9973c9babfbc262068109160c60b5",
    "capacity-calibrated": "6e31ffd6a8334d2d90b4cdceed03442c8d462fbf9248e86a0489eb0daa1249f3",
    "keda-queue": "1304bbc93b74cf78309ff3a2d5b492137ecdf18143040f919500d52cac86df41",
    "hybrid-predictive": "7a7c0016f1c7afbfb83f035d7921becbfb6f7f31b23d40cc703e0a3a451d828a",
    "dynamo-load": "a5deaece264c29f6876338bacd9dcea2e617626ffa56fd07e6615806d588ffe5",
}


@pytest.fixture(scope="module")
def ten_minutes():
    return window(make_preset("default", seed=0), 0.0, 600.0)


def _digest(workload, policy: str) -> str:
    settings = BacktestSettings(min_replicas=1, max_replicas=16, initial_replicas=2).with_cold_start()
    out = io.StringIO()
    run_policy(workload, policy, settings, decisions_out=out)
    log = out.getvalue()
    # dynamo-sla adjusts every 180 s: 3 ticks in 10 minutes, the sparsest log here
    assert log.count("\n") >= 3, log
    return hashlib.sha256(log.encode()).hexdigest()


@pytest.mark.parametrize("policy", sorted(GOLDEN))
def test_decision_log_is_unchanged(ten_minutes, policy):
    assert _digest(ten_minutes, policy) == GOLDEN[policy]
