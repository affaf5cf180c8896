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
#: (branch fidelity): the engine stage refit moves every step time. And again with the host CPU
#: factor (a GH200's Grace host; branch gh200-host): the engine stage refit moves vLLM's shared
#: terms, so every x86 step time moves by 1-2% too.
GOLDEN: dict[str, str] = {
    "slo": "1828728c8ea07722daea83b4c337a96d5937563b4b82a16881ea0dade9c83478",
    "static": "bd0f24eb07ff0357ad63880583614baafab6a786a21e753c788c7da46aa63210",
    "knative-kpa": "052b46bb227555f6e21eb6f57e820b58d72cc660b3e10f2752dcb56869010d63",
    "dynamo-sla": "181797429680043169c6e5e8f86714a69608e453b05f74efc3b0c50acbe54c10",
    "three-layer": "c350e351b750a24291e0a2a0cf9d9141e92143675d53f6c7a48f996ccb329cce",
    "capacity-calibrated": "1c0b2db01630415a2e41eb5e14b5161761e98b36f5a9e369724fc27921711e58",
    "keda-queue": "743cae70c897116722578fd0f620f5f06ec3e6b385b3ee76bcd4bf1afa60c2f3",
    "hybrid-predictive": "a072b74cbf3bdfd307d23a54a5bd7cb588f4066884280e3914963f8dc158408b",
    "dynamo-load": "c18e3019352151811fb8a0a8e18a8667d6de284fdb4c01e5831fa7bcb000d9ff",
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
#: again with the engine-stage refit of branch fidelity (every step time moves), and with that of
#: branch gh200-host (the host CPU factor's refit moves vLLM's shared terms).
RESULTS: dict[str, str] = {
    "capacity-calibrated": "4f1db96b830ffb7f2a6dedad769e905b107926626039466ccd513829b6c5ecca",
    "dynamo-load": "d9926be10f308b0a3cdb9aff0437b5b73823ccbb2abe0c657c8bab7b09d5f9aa",
    "dynamo-sla": "a37e51f8af0a74c38666a497cc38484eb6d0a8af90b0512237b8d40c38026905",
    "hybrid-predictive": "1c263767d64582ed5d02095e14c3ba742ac1052e5c01a87884e8ba6d2a6adaec",
    "keda-queue": "1507f76cfaad65cbe921141e73f1480721403203ab032cc977594e7f6cbc07e5",
    "knative-kpa": "023b85f62bf28ec825c0aa1dc20c33544607fd2b04e61045eaa49fc403770aac",
    "slo": "4ecd4d6b817ae736faa5852368b87d5e3f5b8699dced51a273dd07b5d9d5a1bc",
    "static": "a66de61103807d99e6e8e05ffeb7c88f5a3bd9ff247a5771685994e729a7cf26",
    "three-layer": "8d30b5ad6cc32bbfa26122cccef99388cd38b6b0395ac5df91fabf7b422700ca",
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
