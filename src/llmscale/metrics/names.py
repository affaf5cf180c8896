"""Metric names of the exporters llmscale reads, in one table.

Names, types and histogram buckets are vLLM's, TGI's, Triton's and the DCGM
exporter's own (sources: vllm ``vllm/v1/metrics/loggers.py`` and
``vllm/engine/metrics.py``; dcgm-exporter ``etc/default-counters.csv`` and
``etc/dcp-metrics-included.csv``; see docs/notes/exporters-and-peer-autoscalers.md).
The simulator exports under these names so that the same signal code reads a
simulated fleet and a live one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ACTIVATOR",
    "DCGM",
    "DERIVED",
    "HISTOGRAM_BOUNDS",
    "ITERATION_TOKENS_BUCKETS",
    "REQUEST_PARAMS_N_BUCKETS",
    "SIM",
    "TGI",
    "TRITON",
    "VLLM",
    "VLLM_HISTOGRAMS",
    "VLLM_OLD",
    "Names",
    "VllmMetric",
    "vllm_1_2_5_buckets",
]

# vLLM V1 histogram buckets (verbatim figures from vllm/v1/metrics/loggers.py).
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

#: ``vllm:request_params_n``'s buckets (vLLM's ``histogram_n_request``)
REQUEST_PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
#: ``vllm:iteration_tokens_total``: tokens per engine step (vllm/v1/metrics/loggers.py, V1).
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

#: Buckets the simulator uses for each histogram family it keeps per replica.
HISTOGRAM_BOUNDS: dict[str, tuple[float, ...]] = {
    "ttft": TTFT_BUCKETS_S,
    "itl": ITL_BUCKETS_S,
    "e2e": REQUEST_LATENCY_BUCKETS_S,
    "iteration_tokens": tuple(float(b) for b in ITERATION_TOKENS_BUCKETS),
}


def vllm_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """vLLM's token-count buckets up to ``max_value``: 1, 2, 5, 10, 20, 50, ... (its build_1_2_5_buckets).

    ``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens`` use them
    with the model's max_model_len: 8192 gives 1, 2, 5, ..., 2000, 5000.
    """
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return tuple(out)
            out.append(m * scale)
        scale *= 10


class VllmMetric:
    """vLLM's metric names as plain strings (the exporter writes all of them): the one place each
    is spelt. :data:`VLLM` and :data:`VLLM_OLD` pick from them, policies and the emulator name them
    through this class (``tests/metrics/test_metric_names_once.py`` checks that no other module
    of ``src/llmscale`` spells one)."""

    RUNNING = "vllm:num_requests_running"
    WAITING = "vllm:num_requests_waiting"
    KV_USAGE = "vllm:kv_cache_usage_perc"
    KV_USAGE_OLD = "vllm:gpu_cache_usage_perc"
    PREEMPTIONS = "vllm:num_preemptions_total"
    PROMPT_TOKENS = "vllm:prompt_tokens_total"
    GENERATION_TOKENS = "vllm:generation_tokens_total"
    TTFT = "vllm:time_to_first_token_seconds"
    E2E = "vllm:e2e_request_latency_seconds"
    ITL = "vllm:inter_token_latency_seconds"
    ITL_OLD = "vllm:time_per_output_token_seconds"
    TPOT = "vllm:request_time_per_output_token_seconds"
    QUEUE_TIME = "vllm:request_queue_time_seconds"
    # Exported by emulate's replicas (per request, per engine step, configuration).
    REQUEST_SUCCESS = "vllm:request_success_total"  # counter, label finished_reason
    REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"  # histogram, vllm_1_2_5_buckets
    REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"  # histogram, vllm_1_2_5_buckets
    ITERATION_TOKENS = "vllm:iteration_tokens_total"  # histogram, ITERATION_TOKENS_BUCKETS
    CACHE_CONFIG_INFO = "vllm:cache_config_info"  # gauge at 1, the cache settings as labels
    #: gauge, label sleep_state (awake / weights_offloaded / discard_all): 1 on the engine's state
    #: (vLLM's sleep mode; vllm/v1/metrics/loggers.py ``record_sleep_state``)
    ENGINE_SLEEP_STATE = "vllm:engine_sleep_state"
    # Prefix-cache counters, in tokens (vllm/v1/metrics/loggers.py): queried and found cached.
    PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
    PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
    #: their names before 0.9's rename, still exported (deprecated) by vLLM 0.10
    PREFIX_CACHE_QUERIES_OLD = "vllm:gpu_prefix_cache_queries_total"
    PREFIX_CACHE_HITS_OLD = "vllm:gpu_prefix_cache_hits_total"
    # Per finished request, histograms with REQUEST_LATENCY_BUCKETS_S: scheduled -> first token,
    # first -> last token, scheduled -> last token.
    PREFILL_TIME = "vllm:request_prefill_time_seconds"
    DECODE_TIME = "vllm:request_decode_time_seconds"
    INFERENCE_TIME = "vllm:request_inference_time_seconds"
    #: histogram of the request's ``n`` (REQUEST_PARAMS_N_BUCKETS)
    PARAMS_N = "vllm:request_params_n"
    #: histogram of the request's ``max_tokens`` (vllm_1_2_5_buckets(max_model_len))
    PARAMS_MAX_TOKENS = "vllm:request_params_max_tokens"


@dataclass(frozen=True)
class Names:
    """Names one backend generation uses for the quantities llmscale reads (None: not exported)."""

    running: str | None
    waiting: str | None
    kv_usage: str | None  # 0..1
    preemptions: str | None  # counter
    prompt_tokens: str | None  # counter
    generation_tokens: str | None  # counter
    ttft: str | None  # histogram, seconds
    e2e: str | None  # histogram, seconds
    itl: str | None  # histogram, seconds per output token (per token)
    tpot: str | None  # histogram, per-request mean seconds per output token
    queue_time: str | None  # histogram, seconds
    #: histogram, output tokens per finished request (its spread: the in-flight context is
    #: length-biased, docs/tail-model.md); None where the backend exports no such histogram
    output_tokens: str | None = None
    #: histogram, prompt tokens per finished request (its spread sets the prefill tail)
    prompt_lengths: str | None = None


#: vLLM V1, current names (0.11+).
VLLM = Names(
    running=VllmMetric.RUNNING,
    waiting=VllmMetric.WAITING,
    kv_usage=VllmMetric.KV_USAGE,
    preemptions=VllmMetric.PREEMPTIONS,
    prompt_tokens=VllmMetric.PROMPT_TOKENS,
    generation_tokens=VllmMetric.GENERATION_TOKENS,
    ttft=VllmMetric.TTFT,
    e2e=VllmMetric.E2E,
    itl=VllmMetric.ITL,
    tpot=VllmMetric.TPOT,
    queue_time=VllmMetric.QUEUE_TIME,
    output_tokens=VllmMetric.REQUEST_GENERATION_TOKENS,
    prompt_lengths=VllmMetric.REQUEST_PROMPT_TOKENS,
)

#: vLLM V0 and V1 before 0.9/0.11: the KV gauge and per-token latency had the old names.
VLLM_OLD = Names(
    running=VllmMetric.RUNNING,
    waiting=VllmMetric.WAITING,
    kv_usage=VllmMetric.KV_USAGE_OLD,
    preemptions=VllmMetric.PREEMPTIONS,
    prompt_tokens=VllmMetric.PROMPT_TOKENS,
    generation_tokens=VllmMetric.GENERATION_TOKENS,
    ttft=VllmMetric.TTFT,
    e2e=VllmMetric.E2E,
    itl=VllmMetric.ITL_OLD,
    tpot=None,
    queue_time=VllmMetric.QUEUE_TIME,
    output_tokens=VllmMetric.REQUEST_GENERATION_TOKENS,
    prompt_lengths=VllmMetric.REQUEST_PROMPT_TOKENS,
)

#: the vLLM names that are histograms (their series carry ``_bucket``, ``_sum`` and ``_count``)
VLLM_HISTOGRAMS: frozenset[str] = frozenset(
    {
        VllmMetric.TTFT,
        VllmMetric.E2E,
        VllmMetric.ITL,
        VllmMetric.ITL_OLD,
        VllmMetric.TPOT,
        VllmMetric.QUEUE_TIME,
        VllmMetric.REQUEST_PROMPT_TOKENS,
        VllmMetric.REQUEST_GENERATION_TOKENS,
        VllmMetric.ITERATION_TOKENS,
    }
)

#: Hugging Face text-generation-inference (no time-to-first-token metric exists).
TGI = Names(
    running="tgi_batch_current_size",
    waiting="tgi_queue_size",
    kv_usage=None,
    preemptions=None,
    prompt_tokens=None,
    generation_tokens=None,
    ttft=None,
    e2e="tgi_request_duration",
    itl="tgi_request_mean_time_per_token_duration",
    tpot=None,
    queue_time="tgi_request_queue_duration",
)

#: NVIDIA Triton (plain server metrics; TRT-LLM's are labelled families).
TRITON = Names(
    running=None,
    waiting="nv_inference_pending_request_count",
    kv_usage=None,
    preemptions=None,
    prompt_tokens=None,
    generation_tokens=None,
    ttft=None,
    e2e=None,
    itl=None,
    tpot=None,
    queue_time=None,
)


class DCGM:
    """DCGM exporter fields (metric name = field name)."""

    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent 0-100
    MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"  # percent 0-100
    FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
    FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
    GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0-1
    SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"  # ratio 0-1
    SM_OCCUPANCY = "DCGM_FI_PROF_SM_OCCUPANCY"  # ratio 0-1
    DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"  # ratio 0-1
    TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"  # ratio 0-1


class DERIVED:
    """Windowed statistics of an exporter's series, computed where its fine samples are.

    ``DRAM_ACTIVE_P95_60S``: seed 004's bandwidth saturation of one replica, the P95 of
    ``DCGM_FI_PROF_DRAM_ACTIVE`` sampled every 100 ms over the last 60 s (600 samples). The
    emulator's pages export it; live, Prometheus computes it from a 100 ms scrape of
    dcgm-exporter run with ``-c 100`` (README, "Seed 004's signals at their own resolution").
    """

    DRAM_ACTIVE_P95_60S = "llmscale:dram_active_p95_60s"  # ratio 0-1


class ACTIVATOR:
    """What a front door that holds requests while no replica is ready exports (llmscale's own names).

    ``REQUESTS_HELD``: requests held now, waiting for a first replica to be ready. A fleet at zero
    replicas has no engine to report a queue, so without this gauge the demand that should wake it
    is invisible (a request held 30 s at emulate's front door read as ``queue_waiting 0``).
    ``llmscale emulate`` exports it on its front door's ``/metrics``; the pod-scrape source reads it
    from ``metrics.scrape.activator_url`` and the Prometheus source with
    ``metrics.prometheus.activator_query``, into ``Observation.gateway_queue``, which
    ``queue_waiting`` counts when no replica serves (docs/notes/live-controller-contracts.md).
    """

    REQUESTS_HELD = "llmscale:activator_requests_held"  # gauge, requests


class SIM:
    """Series only the simulator exports (no real exporter has them)."""

    L2_MISS = "llmscale_sim:gpu_l2_miss_ratio"  # a proxy: share of the step's time bound by HBM traffic
    #: gauge: KV-cache blocks in the replica's pool (16 tokens each), e.g. 28,000 on an H100 with
    #: Llama-3-8B. Not a counter, so no ``_total`` (Prometheus reserves that suffix for counters).
    KV_BLOCKS = "llmscale_sim:kv_cache_blocks"
