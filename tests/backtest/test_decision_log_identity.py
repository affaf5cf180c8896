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

``slo``'s digests changed on purpose again with its control around steps and crowds (branch
slo-default, ``docs/tail-model.md``, "Steps and crowds faster than a cold start"): the level's
arrival estimate takes the growth of the requests in the system over the served rate's own
60 s window (the backlog path keeps one tick's), a TTFT P99 is read only once a latency window
has passed on a grown fleet, and its guards run with ``hold_starting`` off (starts kept while a
queue builds: rule ``hold-starts``). Only ``slo``'s
digests changed: every other policy's stayed as it was (this test, run on that branch).

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
#: Every digest changed with the refit of the step-time coefficients (issue 21, item 6: bounded,
#: regularised fit with one optimum; docs/performance-model-fit.md): the simulator's step times
#: move, and with them every observation and decision. And again when vLLM's sampling cost became
#: one per iteration per vocabulary entry and its all-reduce latency grew with the TP group
#: (branch fidelity): the engine stage refit moves every step time.
GOLDEN: dict[str, str] = {
    "slo": "aa8b3fe59188925c7516f1ac92fde6f362a14f9363255084461bf13e52a343d6",
    "static": "48645be4f7f58fafcd83524ffe46366773e788c8d796f9650839a3f7fc9910f2",
    "knative-kpa": "6023f3a57d06c8805ad51ddb77a38ab431e78acac6af2bd9fa9226e2a8d3ac94",
    "dynamo-sla": "e32b8614e9c08393ec02b0ef5f45b88a4a881a2f7e2f3985f75586be80d6308f",
    "three-layer": "c573a23ae0af49b8869542b481f524132333a6f059fc7d92fa9c9a9ada1bbf5b",
    "capacity-calibrated": "0db588737d8ad901689cdb4bd3a9a0dfe68f03f7da0926576277751ac274303e",
    "keda-queue": "62a6a74de4b8df38c7dd2176f355b18b52c575eb1b6accf85c0aa980fdeb38bb",
    "hybrid-predictive": "f3aa9843630acd0e4ef603b2b4926dedb55ca8af1a279654131acc221bfb1a9d",
    "dynamo-load": "bdff8646d86a09dc484c4655cf29d79d3edb215485c11b1086dd0758e741b096",
}


@pytest.fixture(scope="module")
def ten_minutes():
    return window(make_preset("default", seed=0), 0.0, 600.0)


#: policy -> SHA-256 of its results (the backtest JSON's row: attainment, percentiles, GPU-hours,
#: scale events, and the time series the report draws), from main at 91db6fe, before the layers
#: refactor (issue 22) moved modules, split policies/dynamo.py and merged the replica's two
#: admission loops. ``wall_s`` is the machine's time, not a result: it is left out. Both tables
#: were taken again when the refit coefficients (every policy) and slo's tail model (slo alone)
#: joined the refactored tree. Taken again when every row gained ``cost`` and ``cost_currency``
#: (the GPU-hours at the default prices per GPU-hour, docs/gpu-mix.md): with those two keys taken
#: out every row's digest equals the one before, and every decision log is unchanged (checked for
#: all nine policies on branch gpu-mix). slo's row merged with its own change of the same day
#: (branch slo-default): without ``cost`` and ``cost_currency`` it is that branch's digest. Taken
#: again with the engine-stage refit of branch fidelity (every step time moves).
RESULTS: dict[str, str] = {
    "capacity-calibrated": "d621ec650eb0ab516ab4f777d18e1d8e0948fb23d9cc0f11980b15876e792a55",
    "dynamo-load": "2b5f1db3a33ff20709ac0512fcdf288c4e175b5bcaa8cf52c64f05606b41c507",
    "dynamo-sla": "8992342bcdfcc5abbc02c9eb87ce2a00f3eeef610f9ef6459f37644a1b9e0844",
    "hybrid-predictive": "2362853f02afa5b838eb54613df196dca0af5db00608f4cf5207bbbb1ebb3833",
    "keda-queue": "cc751019b706d1701715bd43e9a6575153ea368a47a53293f802649dd5d36ebc",
    "knative-kpa": "5c095ffb4acb5e5ad0162193d489eed56f64e0abbe902bde7cbab9033372ddf2",
    "slo": "c53e72183a686fe123748118143161c5afe7df7f80263bfcadb619917c0b49a2",
    "static": "b07da533f4210296c0f2fe6d8fb1ad4deae943dd005d3e0da12ddf1c53690ce5",
    "three-layer": "9dd5c4b1a2c21736a05459419aab1973ffb9a94f6b52152e8190ba675573fe67",
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
