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
#: move, and with them every observation and decision.
GOLDEN: dict[str, str] = {
    "slo": "2379cfcf6457c2975b528d3e2b31ee054db63ace0f6bf9dffa3d4fddf63dff02",
    "static": "634372b1f2fba3df7f2951993aa9c627909979ae9ba2400258f55b2d55d72f83",
    "knative-kpa": "ab47daccb174960136b1e981a1a137d587dec23a2b5adcc7efc7dcf4d1c0d8b7",
    "dynamo-sla": "989b9f29b5ceb4c2c08150291e27f1687549543e5958a6a8309e363cca7d16db",
    "three-layer": "c724fc71034050c77ac94ad06209301db0760782719a68c32e32dd72155a17ba",
    "capacity-calibrated": "71f13e2044bf74efe7a5fc984724add376cedc0ffedb91eb12ab9d5504922711",
    "keda-queue": "041b40aeae760cf9d06353fde82b9e23fe7073bf1e66a9b6850b8b78a49060eb",
    "hybrid-predictive": "270725a3422394d7f147cab4d36dcf8dd5593b1d40b04c00b9a69f5d05ed19b4",
    "dynamo-load": "5915b7ae72689117239dad4be34232d6a802366017a9d7e35743a77b0b1da9bc",
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
#: (branch slo-default): without ``cost`` and ``cost_currency`` it is that branch's digest.
RESULTS: dict[str, str] = {
    "capacity-calibrated": "f91f7586db797e07953f0329a0012634f543980cf68579c6556654a1eee0eb23",
    "dynamo-load": "4056c596328f3a41ecd3e9043a301ba74bf1e6a84eb47a4dffcaf213716b5f96",
    "dynamo-sla": "4e7d6e443cf14c06180d2b9e8653f1a954c154245cb01e6f50ce6a913e5d345d",
    "hybrid-predictive": "44e80d1320b8f9bf39fc35da874237799f90de34bcb41ef44edc6a1859e9640d",
    "keda-queue": "bf85afd5e7b2fa7d2f032bcdedfff901dcb29933402d89eeedfdc5df9da2a845",
    "knative-kpa": "437dfce3a08413295aa37afd1a36b99e95dfb71ee5a3b957c6bb1908b552e6e2",
    "slo": "29a6b236fa8d0c14224c5bb96f4960fd721f7b48351bfff1401644b6139d5f0f",
    "static": "16eb2bc761dc3f2a8cfc373b0c3f61168013d6261b7e75b8ae7559281f445944",
    "three-layer": "14f9bd40a46df08a9425127fe17109d14b557d0a5246b52def4aef3c58320485",
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
