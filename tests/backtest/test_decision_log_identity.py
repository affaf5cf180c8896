"""The backtest's decision logs are pinned byte for byte across the controller-core refactor.

Each digest below is the SHA-256 of one policy's decision log (one JSON line per tick) over the
first 10 minutes of the ``default`` preset, computed by running this very file against the code
*before* the refactor (main at 662c52c, with ``PYTHONPATH`` pointing at its sources). A refactor
of the tick (``controller/core.py``), of the deployment value or of the guard merge must leave
every line as it was; an intended change of behaviour updates a digest here and says why in the
commit. The start tiers changed the lines' content, not the decisions: a line after starts
says which tier each took (``starts``) and ``slo``'s inputs carry its standby pool's numbers
(``standby_replicas``, ``standby_sized``, ``burst_peak_excess_rps``, ``bursts_in_memory``,
``standby_prevented_misses_per_h``, ``standby_cost_gpu_s_per_h``); with those keys taken out
every log equals 662c52c's, line for line (checked when these digests were updated). The
fuller comparison (every policy, 15 minutes of the preset and the Azure conversation trace x20)
is a script, not a test: it takes minutes.
"""

from __future__ import annotations

import hashlib
import io

import pytest

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.workloads import make_preset, window

#: policy -> SHA-256 of its decision log, from the pre-refactor code (see the module docstring)
GOLDEN: dict[str, str] = {
    "slo": "74afec96cc032cbb15d2e554fc006a7f0a81b726cbf3255fbcdb33dd007cce6f",
    "static": "5e08bfb236fdbcf0793b319c0b7d46e0ac3ea5a96b946512e4dd075944c7c15d",
    "knative-kpa": "30722f44897442bd5cf8b4253a7c5d01fb6384d843e178c16e29af2ea8596b59",
    "dynamo-sla": "7fa170f91a25fb83746b4dd5d539f1d2b550cec44ed6b7fe71bb04d2feb4a54c",
    "three-layer": "a88fc52e7110c36a8ee22039622a6b9bbedb5ffee79c7a2da6013ffdb5736ffd",
    "capacity-calibrated": "9254d29c122f8dbd54cf57e9bbcfba183e6602650b956d21c77f90def074bd00",
    "keda-queue": "a1c211fed2e4c0d3d7c3327e9642a096eda87a7776eae8611edef24b5671ce21",
    "hybrid-predictive": "8b0f961e8a133514c8c4abb315ec54ca64ba55e29fb98e5ab94ebb5ed9a18e98",
    "dynamo-load": "428510ac6788227c2b9677b66ee1191cd269e1a6c0ea3cdbf59be42ad8052a7a",
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
