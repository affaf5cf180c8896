"""The names of every signal a policy may read, with units — the contract between signals/ and policies/.

``Signals.values[name]`` is a :class:`llmscale.types.SignalValue`; ``value is
None`` when the signal cannot be computed (no data, stale, or undefined, e.g.
a percentile over a window with no requests). Percent-valued signals say so;
ratios are 0..1; "x" is a multiple (observed / predicted, 1 = as modelled).
Windows are over the controller's recent observations (``controller.core.WINDOW_LEN`` ticks).
"""

from __future__ import annotations

__all__ = ["SIGNALS", "SUB_TICK_SIGNALS"]

#: Signals the documents define at a finer resolution than any controller tick: seed 004's bandwidth
#: P95 over 600 samples 100 ms apart and queue entropy over 30 one-second queue lengths, seed 000
#: 2.4's token throughput over a 200-1000 ms window set by the last 5 one-second throughputs. A
#: source may carry those samples (``ReplicaSample.sub_tick``, ``Observation.queue_per_s``); the
#: simulator takes them only for a policy that lists one of these in its ``reads`` (or for a
#: decision log).
SUB_TICK_SIGNALS: frozenset[str] = frozenset(
    {"bw_saturation_p95", "queue_entropy", "throughput_window_ms", "generation_tps_adaptive"}
)

#: name -> (unit, meaning)
SIGNALS: dict[str, tuple[str, str]] = {
    # queues and concurrency (serving replicas + the gateway queue in front of the fleet)
    "queue_waiting": ("requests", "requests waiting: sum over serving replicas plus the gateway queue"),
    "queue_waiting_max": ("requests", "largest per-replica waiting queue"),
    "queue_per_replica": ("requests", "queue_waiting / serving replicas"),
    "running": ("requests", "requests in running batches, summed"),
    "running_per_replica": ("requests", "running / serving replicas"),
    "gateway_queue": ("requests", "requests waiting in front of the fleet (no replica ready)"),
    # latency percentiles from histogram bucket deltas over the window (never means of _sum)
    "ttft_p95_s": ("s", "P95 time to first token over the window"),
    "ttft_p99_s": ("s", "P99 time to first token over the window"),
    "e2e_p95_s": ("s", "P95 end-to-end latency over the window"),
    "e2e_p99_s": ("s", "P99 end-to-end latency over the window"),
    "itl_p95_s": ("s", "P95 inter-token latency over the window"),
    "itl_p99_s": ("s", "P99 inter-token latency over the window"),
    # per request: (last token - first token) / (output tokens - 1), what a TPOT SLO judges; one
    # prefill chunk stretches a single gap (ITL) but a request's TPOT only by its share of gaps
    "tpot_p95_s": ("s", "P95 of per-request time per output token over the window"),
    "tpot_p99_s": ("s", "P99 of per-request time per output token over the window"),
    "queue_time_p95_s": ("s", "P95 time requests waited before their first scheduling"),
    # KV cache and request shape
    "kv_usage_mean": ("ratio", "mean KV-cache usage over serving replicas"),
    "kv_usage_max": ("ratio", "highest KV-cache usage of a serving replica"),
    "kv_growth_pct_per_step": ("%/step", "KV usage growth per controller step (seed 000 3.1)"),
    "prompt_len_mean_tokens": ("tokens", "mean prompt length of requests prefilled in the window"),
    "decode_steps_mean": ("tokens", "mean generated tokens per finished request in the window"),
    "preemptions_per_s": ("1/s", "preemptions per second over the window"),
    # rates
    "request_rate_rps": ("req/s", "finished requests per second over the window (arrival proxy)"),
    "arrival_rate_rps": ("req/s", "requests arriving at the fleet per second over the window (offered load)"),
    "request_rate_std_rps": ("req/s", "standard deviation of the per-tick request rate over the window"),
    "prompt_tps": ("tokens/s", "prompt tokens per second"),
    "generation_tps": ("tokens/s", "generated tokens per second"),
    "throughput_window_ms": ("ms", "adaptive throughput window of seed 000 2.4"),
    "generation_tps_adaptive": (
        "tokens/s",
        "generated tokens per second over seed 000 2.4's adaptive window (from 100 ms token counts)",
    ),
    # GPU
    "gpu_util_mean": ("%", "DCGM_FI_DEV_GPU_UTIL mean over serving replicas: time with work in flight"),
    "sm_active_mean": ("ratio", "DCGM_FI_PROF_SM_ACTIVE mean: share of SM cycles holding a warp"),
    "mem_copy_util_mean": ("%", "DCGM_FI_DEV_MEM_COPY_UTIL mean"),
    "gpu_composite_util": ("%", "max(SM_ACTIVE x 100, MEM_COPY_UTIL) (seed 000 chapter 1)"),
    "effective_vram": ("ratio", "0.4 used/total + 0.3 bw/bw_max + 0.3 l2_miss/0.8 (seed 000 3.3)"),
    "vram_used_ratio": ("ratio", "framebuffer used / total"),
    "bw_saturation_p95": ("ratio", "P95 of memory-bandwidth utilisation over 60 s (seed 004)"),
    "queue_entropy": ("ratio", "normalised Shannon entropy of per-second queue lengths over 30 s (seed 004)"),
    "oom_risk": ("probability", "logistic OOM risk from KV usage, its slope and preemptions (seed 003 3.2)"),
    # rhythm (seed 003 2.5) and predictors
    "rhythm_amplitude_ratio": ("ratio", "dominant-frequency amplitude / total of the load's sliding FFT"),
    "rhythm_decay": ("ratio", "decay of the dominant amplitude between windows"),
    "rhythm_phase": ("rad", "phase of the dominant component"),
    "load_zscore": ("z", "online EWMA z-score of the load (alpha 0.05)"),
    "p99_predicted_decay_s": ("s", "P99 from an exponentially decayed window, lambda 0.5 (seed 000 3.2)"),
    "p99_predicted_queue_s": ("s", "P99 from queue depth and resident ratio (seed 000 2.3)"),
    "p99_predicted_coupled_s": ("s", "P99 from the queue-latency-residency coupling model (seed 003 2.2)"),
    # diagnostics
    "ghost_replicas": ("replicas", "VRAM resident, compute near zero, no requests (seed 000 chapter 1)"),
    "tenant_drift": ("ratio", "metric drift between replicas sharing load (seed 000 2.5)"),
    # the deployment's step-time model against the fleet (controller/drift.py; perf/drift.py):
    # only the live controller knows the model it plans with, so elsewhere they read "not computed"
    "model_drift_itl_ratio": (
        "x",
        "observed mean inter-token latency / the step-time model's at the observed batch, context "
        "and prefill load, over the latency window (1.4: the fleet decodes 40% slower than planned)",
    ),
    "model_drift_ttft_ratio": (
        "x",
        "observed mean TTFT / the model's prefill of the mean prompt next to the observed batch, "
        "over windows in which no request waited",
    ),
    # fleet
    "serving_replicas": ("replicas", "ready replicas with a fresh scrape"),
    "unknown_replicas": ("replicas", "serving replicas whose scrape failed"),
}
