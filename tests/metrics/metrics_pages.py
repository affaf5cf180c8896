"""Worked exposition pages, written as the exporters write them (labels, HELP/TYPE, _created series)."""

from __future__ import annotations

#: vLLM V1 (0.11+ names), two engines of one model: counts add up, the KV ratio averages
VLLM_NEW = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama-8b"} 4.0
vllm:num_requests_running{engine="1",model_name="llama-8b"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama-8b"} 5.0
vllm:num_requests_waiting{engine="1",model_name="llama-8b"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama-8b"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="llama-8b"} 0.25
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="llama-8b"} 1000.0
vllm:prompt_tokens_total{engine="1",model_name="llama-8b"} 500.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="llama-8b"} 1.7645e+09
vllm:prompt_tokens_created{engine="1",model_name="llama-8b"} 1.7645e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="llama-8b"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="llama-8b"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="llama-8b"} 9.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="llama-8b"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="llama-8b"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="llama-8b"} 4.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="llama-8b"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.5",model_name="llama-8b"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="llama-8b"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="llama-8b"} 5.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="llama-8b"} 5.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="llama-8b"} 6.0
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="llama-8b"} 1.7645e+09
"""

#: vLLM V0 names: the KV gauge and per-token latency under their old names, counters declared with _total
VLLM_OLD = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="opt-125m"} 2.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="opt-125m"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="opt-125m"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="opt-125m"} 0.75
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="opt-125m"} 4096.0
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="opt-125m"} 10.0
vllm:time_per_output_token_seconds_bucket{le="0.025",model_name="opt-125m"} 70.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="opt-125m"} 100.0
vllm:time_per_output_token_seconds_count{model_name="opt-125m"} 100.0
vllm:time_per_output_token_seconds_sum{model_name="opt-125m"} 2.25
"""

#: TGI (metrics-exporter-prometheus style: no HELP, histogram without labels)
TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 6
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 12
# TYPE tgi_request_count counter
tgi_request_count 340
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="0.5"} 10
tgi_request_duration_bucket{le="1"} 30
tgi_request_duration_bucket{le="5"} 38
tgi_request_duration_bucket{le="+Inf"} 40
tgi_request_duration_sum 61.5
tgi_request_duration_count 40
"""

#: Triton: pending requests of two models add up; GPU utilisation (0-1 per GPU) averages
TRITON = """\
# HELP nv_inference_pending_request_count Number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="ensemble",version="1"} 3
nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 4
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-aaaa"} 0.9
nv_gpu_utilization{gpu_uuid="GPU-bbbb"} 0.5
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="ensemble",version="1"} 120
"""

#: the DCGM exporter of one pod using two GPUs: utilisation averages, framebuffer MiB add up
DCGM_TWO_GPUS = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaa",device="nvidia0",Hostname="node-1"} 80
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-bbbb",device="nvidia1",Hostname="node-1"} 40
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaaa",device="nvidia0",Hostname="node-1"} 70000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-bbbb",device="nvidia1",Hostname="node-1"} 71000
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-aaaa",device="nvidia0",Hostname="node-1"} 11000
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-bbbb",device="nvidia1",Hostname="node-1"} 10000
# HELP DCGM_FI_PROF_DRAM_ACTIVE Ratio of cycles the device memory interface is active.
# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge
DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="GPU-aaaa",device="nvidia0",Hostname="node-1"} 0.7
DCGM_FI_PROF_DRAM_ACTIVE{gpu="1",UUID="GPU-bbbb",device="nvidia1",Hostname="node-1"} 0.3
"""


def dcgm_node_page(gpus: list[tuple[str, str, float]]) -> str:
    """A node's DCGM exporter with Kubernetes pod mapping: ``(gpu, pod, util %)``; pod "" = no workload."""
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for gpu, pod, util in gpus:
        extra = f',container="vllm",namespace="llm",pod="{pod}"' if pod else ""
        lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-{gpu}",Hostname="node-1"{extra}}} {util}')
    return "\n".join(lines) + "\n"


def vllm_page(
    *,
    waiting: float,
    running: float,
    kv: float,
    ttft_cumulative: tuple[float, float, float, float],
    ttft_sum: float,
) -> str:
    """A one-engine vLLM page with a TTFT histogram over buckets (0.1, 0.5, 1.0, +Inf), for live tests."""
    c = ttft_cumulative
    labels = 'engine="0",model_name="llama-8b"'
    return f"""\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{labels}}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{labels}}} {waiting}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{{labels}}} {kv}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{labels}}} {100.0 * c[3]}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{{labels},le="0.1"}} {c[0]}
vllm:time_to_first_token_seconds_bucket{{{labels},le="0.5"}} {c[1]}
vllm:time_to_first_token_seconds_bucket{{{labels},le="1.0"}} {c[2]}
vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {c[3]}
vllm:time_to_first_token_seconds_count{{{labels}}} {c[3]}
vllm:time_to_first_token_seconds_sum{{{labels}}} {ttft_sum}
"""
