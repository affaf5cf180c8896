"""NVIDIA Dynamo's planner, aggregated (non-disaggregated) mode: ``dynamo-sla`` and ``dynamo-load``.

Both re-implement (not copy) the planner of the ``ai-dynamo==1.6.1`` wheel,
``dynamo/planner/``: the throughput planner of ``core/throughput_scaling.py``
with the capacity search of ``core/perf_model/engine_query.py``
(``_find_aggregated_capacity``, ``_capacity_batch_sizes``, ``_select_capacity``),
the GPU budget of ``core/budget.py`` (``guard_single_scaling_budget``), the
defaults of ``config/defaults.py``, the offered-load query of
``monitoring/traffic_metrics.py`` (``get_avg_request_count``), the load
predictors of ``core/load/predictors.py`` and the FPM-driven load scaling of
``core/load_scaling.py``. Where Dynamo asks its forward-pass model (a fitted
regression or AIConfigurator's simulator), llmscale asks its calibrated
execution-time model (:mod:`llmscale.perf`): the same question -- how long
does one engine iteration take with this much prefill and this much decode
KV -- answered by the model the simulator itself runs.

``dynamo-sla`` (the throughput planner, ``mode = "agg"``)
    Observes every ``tick_s`` (60 s) and decides every ``adjustment_interval``
    (180 s): the interval's request count, mean ISL (``prompt_len_mean_tokens``)
    and OSL (``decode_steps_mean``) are fed to one load predictor each. The
    request count is the *offered* load: 1.6.1 reads the frontend's
    ``requests_started_total`` and falls back to the completed count only when
    that series is missing; here ``arrival_rate_rps`` (the simulator's arrivals
    counter) with ``request_rate_rps`` (completions) as the fallback. The next
    interval's demand ``num_req / interval`` is divided by the engine's capacity,
    ``wanted = ceil(demand / engine_rps)``; then, in 1.6.1's order: at most
    ``max_throughput_scaling_replicas`` (8) replicas up or down from the ready
    count, at least ``min_endpoint``; no scale-up while a previous change is
    still starting; and the GPU budget ``max_gpu_budget`` (8 GPUs, -1 disables)
    with ``gpus_per_engine`` = TP (:func:`gpu_budget_guard`).
    ``engine_rps`` follows the capacity search (:func:`agg_engine_capacity`): up
    to 128 batch sizes up to ``min(max_num_seqs, max_kv_tokens // ctx,
    max_num_batched_tokens - 1)``, each with its ITL, TTFT and rate
    ``bs / (OSL x ITL)``; the best rate within both SLOs wins, and when none is
    within them the best rate overall (flagged ``throughput-sla-unreachable``).
    Worked example in ``tests/policies/test_peer_dynamo.py`` (a stub model: ITL =
    0.01 + 0.0115 bs s, SLO 50 ms -> bs = 3, 3 / (100 x 0.0445) = 0.674 req/s;
    10 req/s -> 15 replicas, 10 from 2 under the +-8 cap, 8 under the budget).
    Load predictors: ``constant`` (the last value, the default here) and
    ``kalman`` (local linear trend, ``kalman_q_level`` 1.0, ``kalman_q_trend`` 0.1,
    ``kalman_r`` 10.0); like Dynamo, non-finite readings count as 0 and leading
    zeros (the idle period before the first traffic) are skipped.

``dynamo-load`` (FPM-driven load scaling, ``mode = "agg"``)
    Every ``load_adjustment_interval`` (5 s) it estimates, per engine, the TTFT of
    a new request (its queued prefill ahead of it, chunked by
    ``max_num_batched_tokens``, at the engine's decode KV) and the ITL of the next
    iteration; per engine: decode KV = ``kv_cache_usage_perc`` x KV capacity,
    queued prefill = ``num_requests_waiting`` x mean ISL. Scale up by 1 when ALL
    engines' TTFT exceed the SLO or ALL engines' ITL do; scale down by 1 only
    when every engine passes the consolidation check with its load multiplied
    by N/(N-1): the queue-induced TTFT stays within ``(SLO - own prefill) x
    sensitivity`` and the combined KV both fits the cache and keeps the ITL
    under ``SLO x sensitivity`` (``load_scaling_down_sensitivity`` 80 %). While a
    previous change is still in progress (ready != desired) it only observes.
    ``optimization_target`` "throughput" / "latency" switch to Dynamo's static
    "easy mode" thresholds on combined KV utilisation (up if ANY engine > 1.0 /
    0.4, down if ALL < 0.6 / 0.1); 1.6.1 refuses that scale-down when the
    busiest engine's share spread over the survivors (``max util x N / (N-1)``)
    would reach the scale-up threshold, so it cannot flap.

SLOs are llmscale's (``slo_ttft_s``, ``slo_tpot_s`` as the ITL target) instead of
Dynamo's ``--ttft 500 ms`` / ``--itl 50 ms``; ``max_num_batched_tokens`` 8192 and
``max_num_seqs`` 256 are vLLM's defaults (or the simulator's, from
the ``Deployment``). ``min_endpoint`` is ``max(1, min_replicas)``.

Deviations: Dynamo's default load predictor is ARIMA (pmdarima) and Prophet
is offered; both need heavy libraries and are not reproduced (``constant`` is
the default here, ``kalman`` the model-based option). The SLA planner's
correction factors (observed / expected TTFT and ITL) are not applied: the
profile here is the model the fleet runs. ``dynamo-load`` defaults to
``optimization_target = "sla"`` (Dynamo's unified config defaults to
"throughput", the static thresholds) so that its SLO estimates and the N/(N-1)
check are what runs; its throughput floor (throughput scaling as a lower
bound) and its GPU budget are off, as in a load-only deployment. A missing
scrape, a per-pod gap or a worker count that does not match the metrics gives
a ``no-data`` decision that holds.

Guards: ``guard_overrides`` =
:data:`~llmscale.policies._hpa_behavior.PEER_GUARD_OVERRIDES`: the planners'
adjustment intervals (and ``dynamo-load``'s "scaling in progress" wait and
steps of one) run inside ``decide``; llmscale's pending-aware cap and KV-
headroom check, which the real project does not have, are off. Hold-on-
missing-data, drain-aware scale-down and the bounds stay on.

The package, one module per job: :mod:`.capacity` (the capacity search and the step-time
questions), :mod:`.predictors` (load predictors), :mod:`.interval` (the adjustment interval
that ``dynamo-sla`` and ``dynamo-disagg`` share), :mod:`.sla` (``dynamo-sla``), :mod:`.load`
(``dynamo-load``) and :mod:`.disagg` (``dynamo-disagg``, built per pool by the backtest).
Importing it registers ``dynamo-sla`` and ``dynamo-load``.
"""

from __future__ import annotations

from llmscale.policies.dynamo import load, sla

__all__ = ["load", "sla"]
