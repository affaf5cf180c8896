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

#: policy -> SHA-256 of its decision log, from the pre-refactor code (see the module docstring)
GOLDEN: dict[str, str] = {
    "slo": "aeb7f2a06fe51b75aa2dbe905833763219aac86370db1aa833698b862b5e7a72",
    "static": "5e08bfb236fdbcf0793b319c0b7d46e0ac3ea5a96b946512e4dd075944c7c15d",
    "knative-kpa": "01dfd3311bdea232c7d8185209925fef5d62c20d00986991e0c2fad8141b17c2",
    "dynamo-sla": "b5bb70f6c8b331abd571d38fb0b3a61833026c5ef905000080e871abd846bc87",
    "three-layer": "8e194ad300aaaf7ab016ed6dd1934541c2314c0296c275f8dc9d4e7583ae9bc7",
    "capacity-calibrated": "59d1888e0a198ea97a89639b264cebeeab20fbe4ca71cd23d0df52059d51c1eb",
    "keda-queue": "87c3dcbfeed12c0070058eb372952443cfe8879d26cd5ca5d79adaaa37ffe161",
    "hybrid-predictive": "080f920c9e7664852c752559a97782d22a5389c6d4849095d73a1390cb330130",
    "dynamo-load": "e752776d68e41e9b9721545d07cce8a0f4c94262a864c7497720e28384986825",
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
