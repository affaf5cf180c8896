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

``slo``'s digest changed on purpose with its tail capacity model (``perf/replica_tails.py``,
branch slo-tails): it sizes from the per-request TTFT/TPOT miss shares in a fleet of the planned
size, smooths the request shape, reacts to a TPOT P99 over the SLO, and its inputs carry
``planned_replicas`` and the TPOT P99 it read.

``slo``'s digest changed on purpose again with the tail model of issue 20 (branch tail-model,
``docs/tail-model.md``): the in-flight context from the observed output- and prompt-length CVs,
the arrivals' index of dispersion, the step from n to n+1 by predicted misses against its
GPU-seconds (rule ``hold-by-cost``; none fires in these ten minutes) with the miss budget
tracked, and abandoned requests; its inputs carry those numbers. Only ``slo``'s digest changed:
every other policy's stayed as it was (this test, run on that branch).

``capacity-calibrated``'s digest changed on purpose when it began asking llmscale's one capacity
model (``perf/replica_tails.py``, mode ``"mean"``; branch one-capacity) instead of its own copy
of the physics: its inputs carry ``capacity_rps_per_replica`` and ``mean_itl_s`` (for
``step_at_b_s``), its B is the model's Little's-law batch at capacity (a float, ~228-251 on the
preset where the old copy read 256), and its proposal moves by one replica on a few ticks (the
commit lists them). ``token-rate`` (not pinned here) takes its default target from the same
call since: 2,402 tokens/s per replica where it read 2,430, so every line's ``inputs.target``,
``inputs.usage_ratio`` and note differ, its proposals on none of the preset's 60 lines, and on
the Azure trace x20 from t = 60 s on (ratio 1.5525 -> 1.5705: 14 -> 15 replicas, and its fleet
after that). Every other policy's log, ``slo``'s included, was compared line by line
(``scripts/compare_decision_logs.sh`` against main at ef6968d) and is unchanged.
"""

from __future__ import annotations

import hashlib
import io
import json

import pytest

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.workloads import make_preset, window

#: policy -> SHA-256 of its decision log, from the pre-refactor code (see the module docstring),
#: updated once since, on purpose: a run writing a decision log samples seed 004's signals at their
#: own resolution (sim/sub_tick.py), so every line's ``observed.bw_saturation_p95`` and
#: ``observed.queue_entropy`` are the P95 of 600 100 ms samples and the entropy of 30 one-second
#: queue lengths; every other field of every line is as before (compared line by line against
#: main at 340a408: 9 policies, 10 minutes of the preset). Merged with the start tiers (module
#: docstring): against each parent, every line differs only in the other's fields, checked line by line.
#: slo's standby pool off by default (no pool unless asked): its lines lose the pool's sizing
#: inputs and are otherwise unchanged (compared line by line).
GOLDEN: dict[str, str] = {
    "slo": "b2760118bbd82559ad996fe9421948313174c00759989f41e340d9fc214b8bac",
    "static": "9c5d68d48a719ae7d0c9e0a28dcc2a5c16d746beff144390a63de6d1f90b8497",
    "knative-kpa": "c4f47efbb4cd3ad8c02c50b4eef328c08d6a0aa08cbb7f0c00065717c0b1bf40",
    "dynamo-sla": "d06ff05498b8297114a5d0d9cf459c9edd500b299eb260a933637b8c2d3ba35d",
    "three-layer": "0d5b6e1a0beb776dd7c1d99a75a31c26438151d3a8743f11e6fe10066c6e5d2c",
    "capacity-calibrated": "c5aee1759326739f9077987bf182da7a1523c3ce572b303da81c6e6a168f7179",
    "keda-queue": "64d3de227a01c35e8fe16c029c2c964a897aca7fb07cc113625e519b6abc449d",
    "hybrid-predictive": "e7cd81a2c4df3d43f51a2f78403ceaa5aafdf11f57be2af7ba8f79936dfae3e4",
    "dynamo-load": "b7e9d5f4bcfbb37cf622026ac2232b09d7cd3f8632800fcd81c9084e09187123",
}


@pytest.fixture(scope="module")
def ten_minutes():
    return window(make_preset("default", seed=0), 0.0, 600.0)


#: policy -> SHA-256 of its results (the backtest JSON's row: attainment, percentiles, GPU-hours,
#: scale events, and the time series the report draws), from main at 91db6fe, before the layers
#: refactor (issue 22) moved modules, split policies/dynamo.py and merged the replica's two
#: admission loops. ``wall_s`` is the machine's time, not a result: it is left out.
RESULTS: dict[str, str] = {
    "capacity-calibrated": "5eef60671871a0d304587b9306a4c34a81ef02db36b9b11553d18433e3b3b5f3",
    "dynamo-load": "2b0d87efad43d20f714a7ce70f1f2e1a65d783b20832afb6166be1ef7e511e08",
    "dynamo-sla": "6deee67ff04ea721eaaa70790c73a97956b9a7e10b34fa5ce9f149045bb7f8d5",
    "hybrid-predictive": "a0b6a770a3ec52dc675e6bc6dbd3e806b8e602277bd03af02e948a0ed9ee9fb5",
    "keda-queue": "d2edc8f6503da07ae547bd03a396ef05ed9218dc931ede9045262985458db810",
    "knative-kpa": "b0923de84726a1ece37b6c83cf65dcf3317570fc54d4164d3d2eb20edf5eb27a",
    "slo": "6558e4c6f54614089160752917f9da65b2f1fdfcb936020fb3f688da7215e5a0",
    "static": "3b342ad298506b36dbd9b98eaffe27365df10fb04c6c8112d451fe0434b49054",
    "three-layer": "e7971a7e39a0a1662ac75502cd675424759a4743db6d0ed9d75ca8ccb4a38e2a",
}


def _digests(workload, policy: str) -> tuple[str, str]:
    """(decision log digest, results digest) of one run: both from the same simulation."""
    settings = BacktestSettings(min_replicas=1, max_replicas=16, initial_replicas=2).with_cold_start()
    out = io.StringIO()
    result = run_policy(workload, policy, settings, decisions_out=out)
    log = out.getvalue()
    # dynamo-sla adjusts every 180 s: 3 ticks in 10 minutes, the sparsest log here
    assert log.count("\n") >= 3, log
    row = {k: v for k, v in result.as_json(with_series=True).items() if k != "wall_s"}
    doc = json.dumps(row, sort_keys=True, default=str)
    return hashlib.sha256(log.encode()).hexdigest(), hashlib.sha256(doc.encode()).hexdigest()


@pytest.mark.parametrize("policy", sorted(GOLDEN))
def test_decision_log_and_results_are_unchanged(ten_minutes, policy):
    log, results = _digests(ten_minutes, policy)
    assert log == GOLDEN[policy]
    assert results == RESULTS[policy]
