"""The names of every signal a policy may read, with units — the contract between signals/ and policies/.

``Signals.values[name]`` is a :class:`llmscale.types.SignalValue`; ``value is
None`` when the signal cannot be computed (no data, stale, or undefined, e.g.
a percentile over a window with no requests). Percent-valued signals say so;
ratios are 0..1; "x" is a multiple (observed / predicted, 1 = as modelled).
Windows are over the controller's recent observations (``controller.core.WINDOW_LEN`` ticks).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["GROUPS", "SIGNALS", "SUB_TICK_SIGNALS", "Signal"]

#: Signals the documents define at a finer resolution than any controller tick: seed 004's bandwidth
#: P95 over 600 samples 100 ms apart and queue entropy over 30 one-second queue lengths, seed 000
#: 2.4's token throughput over a 200-1000 ms window set by the last 5 one-second throughputs. A
#: source may carry those samples (``ReplicaSample.sub_tick``, ``Observation.queue_per_s``); the
#: simulator takes them only for a policy that lists one of these in its ``reads`` (or for a
#: decision log).
SUB_TICK_SIGNALS: frozenset[str] = frozenset(
    {
        "bw_saturation_p95",
        "queue_entropy",
        "throughput_window_ms",
        "generation_tps_adaptive",
        "generation_tps_100ms",
    }
)


class Signal(NamedTuple):
    """One signal of the catalogue."""

    unit: str
    meaning: str
    #: the signals computed together (``signals/fleet.py`` maps each group to the function that
    #: fills it, and computes a group when one of its names is first read); a test checks that each
    #: group's function fills exactly the names the catalogue gives it
    group: str


#: name -> Signal: every signal, written once. The order is the one ``Signals.values`` iterates in
#: (the eager computation's), so a listing, /metrics and a decision log follow it too.
SIGNALS: dict[str, Signal] = {
    # queues and concurrency (serving replicas + the gateway queue in front of the fleet); their
    # order in ``Signals.values`` is the one queue_signals fills them in
    "queue_waiting": Signal(
        "requests", "requests waiting: sum over serving replicas plus the gateway queue", "queues"
    ),
    "queue_waiting_max": Signal("requests", "largest per-replica waiting queue", "queues"),
    "queue_per_replica": Signal("requests", "queue_waiting / serving replicas", "queues"),
    "running": Signal("requests", "requests in running batches, summed", "queues"),
    "running_per_replica": Signal("requests", "running / serving replicas", "queues"),
    "gateway_queue": Signal(
        "requests", "requests waiting in front of the fleet (no replica ready)", "queues"
    ),
    "serving_replicas": Signal("replicas", "ready replicas with a fresh scrape", "queues"),
    "unknown_replicas": Signal("replicas", "serving replicas whose scrape failed", "queues"),
    # latency percentiles from histogram bucket deltas over the window (never means of _sum)
    "ttft_p95_s": Signal("s", "P95 time to first token over the window", "ttft"),
    "ttft_p99_s": Signal("s", "P99 time to first token over the window", "ttft"),
    "e2e_p95_s": Signal("s", "P95 end-to-end latency over the window", "e2e"),
    "e2e_p99_s": Signal("s", "P99 end-to-end latency over the window", "e2e"),
    "itl_p95_s": Signal("s", "P95 inter-token latency over the window", "itl"),
    "itl_p99_s": Signal("s", "P99 inter-token latency over the window", "itl"),
    # per request: (last token - first token) / (output tokens - 1), what a TPOT SLO judges; one
    # prefill chunk stretches a single gap (ITL) but a request's TPOT only by its share of gaps
    "tpot_p95_s": Signal("s", "P95 of per-request time per output token over the window", "tpot"),
    "tpot_p99_s": Signal("s", "P99 of per-request time per output token over the window", "tpot"),
    "queue_time_p95_s": Signal("s", "P95 time requests waited before their first scheduling", "queue_time"),
    # rates and request shape: counter increases over the window, and the per-tick spread
    "request_rate_rps": Signal(
        "req/s", "finished requests per second over the window (arrival proxy)", "counter_rates"
    ),
    "arrival_rate_rps": Signal(
        "req/s", "requests arriving at the fleet per second over the window (offered load)", "counter_rates"
    ),
    "request_rate_std_rps": Signal(
        "req/s", "standard deviation of the per-tick request rate over the window", "step_rates"
    ),
    "prompt_tps": Signal("tokens/s", "prompt tokens per second", "counter_rates"),
    "generation_tps": Signal("tokens/s", "generated tokens per second", "counter_rates"),
    "preemptions_per_s": Signal("1/s", "preemptions per second over the window", "counter_rates"),
    "prompt_len_mean_tokens": Signal(
        "tokens", "mean prompt length of requests prefilled in the window", "counter_rates"
    ),
    "decode_steps_mean": Signal(
        "tokens", "mean generated tokens per finished request in the window", "counter_rates"
    ),
    "throughput_window_ms": Signal("ms", "adaptive throughput window of seed 000 2.4", "step_rates"),
    "generation_tps_adaptive": Signal(
        "tokens/s",
        "generated tokens per second over seed 000 2.4's adaptive window (from 100 ms token counts)",
        "step_rates",
    ),
    "generation_tps_100ms": Signal(
        "tokens/s",
        "generated tokens per second over the newest 100 ms (seed 000 2.4's raw sampling window)",
        "step_rates",
    ),
    "generation_tps_tick": Signal(
        "tokens/s", "generated tokens per second over the last controller step", "step_rates"
    ),
    # KV cache
    "kv_usage_mean": Signal("ratio", "mean KV-cache usage over serving replicas", "kv_usage"),
    "kv_usage_max": Signal("ratio", "highest KV-cache usage of a serving replica", "kv_usage"),
    "kv_growth_pct_per_step": Signal(
        "%/step", "KV usage growth per controller step (seed 000 3.1)", "kv_growth"
    ),
    # GPU
    "gpu_util_mean": Signal(
        "%", "DCGM_FI_DEV_GPU_UTIL mean over serving replicas: time with work in flight", "gpu"
    ),
    "sm_active_mean": Signal(
        "ratio", "DCGM_FI_PROF_SM_ACTIVE mean: share of SM cycles holding a warp", "gpu"
    ),
    "mem_copy_util_mean": Signal("%", "DCGM_FI_DEV_MEM_COPY_UTIL mean", "gpu"),
    "gpu_composite_util": Signal("%", "max(SM_ACTIVE x 100, MEM_COPY_UTIL) (seed 000 chapter 1)", "gpu"),
    "vram_used_ratio": Signal("ratio", "framebuffer used / total", "gpu"),
    "effective_vram": Signal(
        "ratio", "0.4 used/total + 0.3 bw/bw_max + 0.3 l2_miss/0.8 (seed 000 3.3)", "gpu"
    ),
    "bw_saturation_p95": Signal(
        "ratio", "P95 of memory-bandwidth utilisation over 60 s (seed 004)", "bw_saturation"
    ),
    "queue_entropy": Signal(
        "ratio",
        "normalised Shannon entropy of per-second queue lengths over 30 s (seed 004)",
        "queue_entropy",
    ),
    "oom_risk": Signal(
        "probability", "logistic OOM risk from KV usage, its slope and preemptions (seed 003 3.2)", "oom"
    ),
    # load z-score, rhythm (seed 003 2.5) and predictors
    "load_zscore": Signal("z", "online EWMA z-score of the load (alpha 0.05)", "zscore"),
    "rhythm_amplitude_ratio": Signal(
        "ratio", "dominant-frequency amplitude / total of the load's sliding FFT", "rhythm"
    ),
    "rhythm_decay": Signal("ratio", "decay of the dominant amplitude between windows", "rhythm"),
    "rhythm_phase": Signal("rad", "phase of the dominant component", "rhythm"),
    "p99_predicted_decay_s": Signal(
        "s", "P99 from an exponentially decayed window, lambda 0.5 (seed 000 3.2)", "p99_decay"
    ),
    "p99_predicted_queue_s": Signal(
        "s", "P99 from queue depth and resident ratio (seed 000 2.3)", "p99_queue"
    ),
    "p99_predicted_coupled_s": Signal(
        "s", "P99 from the queue-latency-residency coupling model (seed 003 2.2)", "p99_coupled"
    ),
    # diagnostics
    "ghost_replicas": Signal(
        "replicas", "VRAM resident, compute near zero, no requests (seed 000 chapter 1)", "ghost"
    ),
    "tenant_drift": Signal(
        "ratio", "metric drift between replicas sharing load (seed 000 2.5)", "tenant_drift"
    ),
    # the deployment's step-time model against the fleet (controller/drift.py; perf/drift.py):
    # only the live controller knows the model it plans with, so elsewhere they read "not computed"
    "model_drift_itl_ratio": Signal(
        "x",
        "observed mean inter-token latency / the step-time model's at the observed batch, context "
        "and prefill load, over the latency window (1.4: the fleet decodes 40% slower than planned)",
        "model_drift",
    ),
    "model_drift_ttft_ratio": Signal(
        "x",
        "observed mean TTFT / the model's prefill of the mean prompt next to the observed batch, "
        "over windows in which no request waited",
        "model_drift",
    ),
    # what the ``slo`` policy's tail model reads of the request mix and the arrival process
    # (docs/tail-model.md)
    "output_len_cv": Signal(
        "ratio",
        "coefficient of variation of output tokens per finished request over the window "
        "(vllm:request_generation_tokens buckets)",
        "output_lengths",
    ),
    "prompt_len_cv": Signal(
        "ratio",
        "coefficient of variation of prompt tokens per finished request over the window "
        "(vllm:request_prompt_tokens buckets)",
        "output_lengths",
    ),
    "arrival_dispersion": Signal(
        "x",
        "index of dispersion of per-step arrival counts (finished + growth in the system), "
        "Allan variance / mean; Poisson 1",
        "arrival_dispersion",
    ),
}

#: group -> its names, in catalogue order; groups in the order they first appear
GROUPS: dict[str, tuple[str, ...]] = {
    group: tuple(name for name, signal in SIGNALS.items() if signal.group == group)
    for group in dict.fromkeys(signal.group for signal in SIGNALS.values())
}
