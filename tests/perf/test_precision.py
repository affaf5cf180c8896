"""FP8 weights and FP8 KV cache in the step-time model (precision.py; docs/fp8.md).

The bf16 model is the fitted one and must not move; FP8 changes bytes moved, KV capacity and the
GEMM rate by physics only (no coefficient was refitted). Published FP8-vs-BF16 serving figures are
a held-out check: the table pins the model's predicted ratio and its error against each, so a
change to the model shows up here and in docs/fp8.md together.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.errors import ConfigError
from llmscale.perf import PerfModel, get_perf_model, precision_of
from llmscale.precision import BF16, Precision
from llmscale.workloads.synthetic import poisson

W8 = precision_of(quantization="fp8")
KV8 = precision_of(kv_cache_dtype="fp8")
BOTH = precision_of(quantization="fp8", kv_cache_dtype="fp8_e4m3")


@pytest.mark.parametrize(
    ("model", "gpu", "tp"),
    [
        pytest.param("llama-3-8b", "h100-80gb", 1, id="8b-h100"),
        pytest.param("llama-3-70b", "h100-80gb", 4, id="70b-h100-tp4"),
        pytest.param("mixtral-8x7b", "a100-80gb", 2, id="moe-a100-tp2"),
    ],
)
def test_the_default_precision_is_the_fitted_bf16_model_bit_for_bit(model, gpu, tp):
    fitted = PerfModel(model, gpu, tp)
    explicit = PerfModel(model, gpu, tp, precision=precision_of("bfloat16", "auto", None))
    for b, ctx in ((1, 512), (32, 2048), (256, 1024)):
        assert explicit.decode(b, ctx) == fitted.decode(b, ctx)
    assert explicit.prefill(2048) == fitted.prefill(2048)
    assert explicit.kv_capacity_tokens() == fitted.kv_capacity_tokens()
    assert explicit.weights_bytes_per_gpu == fitted.weights_bytes_per_gpu


def test_fp8_kv_cache_doubles_the_tokens_per_byte():
    bf = get_perf_model("llama-3-8b", "h100-80gb", 1)
    kv8 = get_perf_model("llama-3-8b", "h100-80gb", 1, precision=KV8)
    # 128 KiB -> 64 KiB a token; the free memory is the same, so the capacity doubles (to the token)
    assert bf.kv_bytes_per_token == 131_072 and kv8.kv_bytes_per_token == 65_536
    assert kv8.kv_capacity_tokens() in (2 * bf.kv_capacity_tokens(), 2 * bf.kv_capacity_tokens() + 1)
    assert bf.kv_capacity_tokens() == 449_866


def test_fp8_weights_halve_the_linear_layers_only():
    w8 = get_perf_model("llama-3-8b", "h100-80gb", 1, precision=W8)
    # 32 layers x 218.1M linear params at 1 B + embeddings, LM head, norms (1.05e9) at 2 B = 9.08 GB
    assert w8.weights_bytes_per_gpu == pytest.approx(9.08e9, rel=2e-3)
    # the freed 7 GB become KV cache: 449,866 -> 503,114 tokens
    assert w8.kv_capacity_tokens() == 503_114
    # decode at batch 1 streams the weights: 15.23 GB -> 8.25 GB per step
    bf_bytes = get_perf_model("llama-3-8b", "h100-80gb", 1).decode(1, 512).dram_bytes
    assert w8.decode(1, 512).dram_bytes == pytest.approx(bf_bytes - 6.98e9, rel=1e-3)


def test_fp8_gemms_run_at_the_fp8_rate_on_hopper_and_the_bf16_rate_on_ampere():
    # prefill of 2,048 tokens is compute-bound: on an H100 FP8 runs its GEMMs at 1,979 vs 989
    # TFLOP/s (64.3 -> 42.7 ms: attention and element-wise work do not speed up); an A100 has no
    # FP8 tensor cores, vLLM runs the checkpoint weight-only, so prefill is unchanged.
    h_bf, h_w8 = (get_perf_model("llama-3-8b", "h100-80gb", 1, precision=p).prefill(2048) for p in (BF16, W8))
    a_bf, a_w8 = (get_perf_model("llama-3-8b", "a100-80gb", 1, precision=p).prefill(2048) for p in (BF16, W8))
    assert h_bf.duration_s / h_w8.duration_s == pytest.approx(1.51, abs=0.01)
    assert a_w8.duration_s == pytest.approx(a_bf.duration_s, rel=1e-3)
    # ... but the A100's memory-bound decode still gains from streaming half the weight bytes
    a_bf1 = get_perf_model("llama-3-8b", "a100-80gb", 1).decode(1, 512).duration_s
    a_w81 = get_perf_model("llama-3-8b", "a100-80gb", 1, precision=W8).decode(1, 512).duration_s
    assert a_bf1 / a_w81 == pytest.approx(1.55, abs=0.01)


def test_a_70b_fits_two_h100s_only_with_fp8_weights_headroom():
    bf = get_perf_model("llama-3-70b", "h100-80gb", 2)
    w8 = get_perf_model("llama-3-70b", "h100-80gb", 2, precision=W8)
    # bf16: 70.6 GB of weights per GPU leave 25,654 tokens; FP8: 36.3 GB leave 234,550
    assert (bf.kv_capacity_tokens(), w8.kv_capacity_tokens()) == (25_654, 234_550)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"dtype": "fp8"}, "--quantization fp8", id="fp8-is-not-a-dtype"),
        pytest.param({"dtype": "float32"}, "dtype = 'float32'", id="fp32-not-modelled"),
        pytest.param({"kv_cache_dtype": "int8"}, "kv_cache_dtype = 'int8'", id="unknown-kv"),
        pytest.param({"quantization": "awq"}, "quantization = 'awq'", id="unknown-quant"),
    ],
)
def test_unknown_formats_are_refused_with_the_field_named(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("-", r"\-")):
        BacktestSettings(**kwargs)


def test_names_are_vllms():
    assert Precision("half", "fp8", "fp8_e5m2").kv_bytes == 1
    assert precision_of("AUTO", "FP8", "FP8") == Precision("auto", "fp8", "fp8")
    assert precision_of() is BF16


# -- held-out check against published FP8-vs-BF16 serving figures -------------------------------
# Never used to set a coefficient. Each row: what was published (ratio FP8/BF16 of throughput),
# where, and the operating point the model is evaluated at (the conditions the source states;
# where it gives no request shape, a 1,024-token mean context). ``model_ratio`` is the model's
# prediction, pinned; ``error`` = model / published - 1, as docs/fp8.md reports it.
PUBLISHED = [
    pytest.param(
        # vLLM 0.17.1, Llama-3.1-8B-Instruct on one H200 NVL (a 71 GB MIG slice), batch 16:
        # BF16 ~1,085 tok/s, FP8 weights ~1,328-1,456 tok/s, "+34%"
        "https://github.com/ssaketh-ch/llama31b-benchmark",
        ("llama-3.1-8b", "h200", 1, 16, 1024, W8),
        1.34,
        1.256,
        -0.063,
        id="vllm-8b-h200-batch16",
    ),
    pytest.param(
        # vLLM, Llama-3-8B on one H100, saturating load: 7,437 -> 11,921 output tok/s (1.60x);
        # the request shape is not given: evaluated at the engine's full decode batch (256)
        "http://www.mynw.cn/news/439883.html",
        ("llama-3-8b", "h100-80gb", 1, 256, 1024, W8),
        1.60,
        1.069,
        -0.332,
        id="vllm-8b-h100-saturated",
    ),
    pytest.param(
        # vLLM's FP8 W8A8 page: "up to a 1.6x improvement in throughput"; compared with the
        # model's best decode ratio over batch sizes (batch 1, weight streaming)
        "https://docs.vllm.ai/en/latest/features/quantization/fp8/",
        ("llama-3-8b", "h100-80gb", 1, 1, 1024, W8),
        1.60,
        1.426,
        -0.109,
        id="vllm-docs-up-to",
    ),
    pytest.param(
        # TensorRT-LLM 0.9, Llama-3-70B-Instruct on 4 x H100 SXM, batch 32, 2,048-token sequences,
        # FP8 weights+activations and FP8 KV: 2,840 -> 5,210 tok/s/GPU (1.83x). Another engine:
        # its bf16 baseline is not vLLM's
        "https://mikamirai.com/blog/fp8-optimization/",
        ("llama-3-70b", "h100-80gb", 4, 32, 2048, BOTH),
        1.83,
        1.457,
        -0.204,
        id="trtllm-70b-4xh100-batch32",
    ),
]


@pytest.mark.parametrize(("source", "point", "published", "model_ratio", "error"), PUBLISHED)
def test_published_fp8_speedups_held_out(source, point, published, model_ratio, error):
    model, gpu, tp, batch, ctx, precision = point
    bf = get_perf_model(model, gpu, tp).decode_throughput(batch, ctx)
    fp8 = get_perf_model(model, gpu, tp, precision=precision).decode_throughput(batch, ctx)
    ratio = fp8 / bf
    assert ratio > 1.0, source  # FP8 never slower in the model
    assert ratio == pytest.approx(model_ratio, abs=0.005), source
    assert ratio / published - 1.0 == pytest.approx(error, abs=0.005), source


def test_an_fp8_backtest_serves_more_per_replica_end_to_end():
    # the same Poisson load on 2 static replicas: FP8 weights + KV finish the same requests with a
    # lower TPOT (every decode step streams 7 GB less weights and half the KV bytes)
    w = poisson(12.0, 120.0, seed=3)
    base = BacktestSettings(initial_replicas=2, min_replicas=1, max_replicas=4,
                            policy_params={"static": {"replicas": 2}})  # fmt: skip
    fp8 = replace(base, quantization="fp8", kv_cache_dtype="fp8")
    r_bf = run_policy(w, "static", base).summary
    r_w8 = run_policy(w, "static", fp8).summary
    assert fp8.deployment().precision == Precision("auto", "fp8", "fp8")
    assert r_w8["completed"] >= r_bf["completed"] > 0.95 * w.num_requests
    assert r_w8["tpot_p50_s"] < r_bf["tpot_p50_s"] * 0.85
    assert math.isfinite(r_w8["ttft_p95_s"]) and r_w8["ttft_p95_s"] <= r_bf["ttft_p95_s"]
