"""Step-time model: exact decode affinity, monotonicity, utilisation, KV capacity, helpers."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.errors import ConfigError
from llmscale.perf import DecodeAffine, PerfModel, StepCost, get_perf_model
from llmscale.perf.coefficients import coefficients_from_dict, coefficients_to_dict, load_coefficients

CONFIGS = [
    ("llama-3-8b", "h100-80gb", 1),
    ("llama-2-7b", "a100-80gb", 1),
    ("mistral-7b", "h200", 2),
    ("llama-2-70b", "a100-80gb", 4),
    ("llama-3-70b", "h100-80gb", 8),
    ("yi-34b", "a100-80gb-pcie", 2),
    ("bloom-176b", "h100-80gb", 8),
]
config = st.sampled_from(CONFIGS)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)


@settings(max_examples=300, deadline=None)
@given(cfg=config, batch=st.integers(0, 1500), s1=st.integers(0, 4_000_000), s2=st.integers(0, 4_000_000))
def test_decode_step_is_exactly_affine_in_context(
    cfg: tuple[str, str, int], batch: int, s1: int, s2: int
) -> None:
    pm = get_perf_model(*cfg)
    aff = pm.decode_affine(batch)
    assert isinstance(aff, DecodeAffine)
    for s in (s1, s2):
        c = pm.step(0, 0.0, 0, batch, s if batch else 0)
        s_eff = s if batch else 0
        assert _close(c.duration_s, aff.base_s + aff.per_ctx_s * s_eff)
        assert _close(c.sm_busy_s, aff.busy_base_s + aff.busy_per_ctx_s * s_eff)
        assert math.isclose(c.dram_bytes, aff.bytes_base + aff.bytes_per_ctx * s_eff, rel_tol=1e-12)
    if batch:
        # The duration is bit-for-bit what the affine form gives (same operations).
        assert pm.step(0, 0.0, 0, batch, s1).duration_s == aff.base_s + aff.per_ctx_s * s1
        lo, hi = sorted((s1, s2))
        d_lo = pm.step(0, 0.0, 0, batch, lo).duration_s
        d_hi = pm.step(0, 0.0, 0, batch, hi).duration_s
        assert math.isclose(d_hi - d_lo, aff.per_ctx_s * (hi - lo), rel_tol=1e-9, abs_tol=1e-12)


def test_decode_affine_is_cached_per_batch() -> None:
    pm = get_perf_model("llama-3-8b", "h100", 1)
    assert pm.decode_affine(64) is pm.decode_affine(64)
    big = pm.decode_affine(5000)  # beyond the list cache: still correct
    assert _close(pm.step(0, 0.0, 0, 5000, 10**6).duration_s, big.base_s + big.per_ctx_s * 10**6)


_steps = st.tuples(
    st.integers(0, 16384),  # prefill tokens
    st.integers(0, 64),  # prefill seqs
    st.integers(0, 512),  # decode seqs
    st.integers(0, 4096),  # mean decode context
    st.integers(0, 8192),  # cached prefix per prefill seq
)


def _args(t: tuple[int, int, int, int, int]) -> tuple[int, float, int, int, int]:
    tokens, seqs, dec, ctx, prefix = t
    seqs = min(seqs, tokens) if tokens else 0
    if tokens and not seqs:
        seqs = 1
    chunk = tokens / seqs if seqs else 0.0
    pairs = seqs * chunk * (prefix + (chunk + 1) / 2.0)
    return tokens, pairs, seqs, dec, dec * ctx


@settings(max_examples=300, deadline=None)
@given(
    cfg=config,
    t=_steps,
    extra=st.integers(1, 4096),
    what=st.sampled_from(["tokens", "pairs", "decode", "ctx"]),
)
def test_more_work_is_never_faster(
    cfg: tuple[str, str, int], t: tuple[int, int, int, int, int], extra: int, what: str
) -> None:
    pm = get_perf_model(*cfg)
    tokens, pairs, seqs, dec, ctx = _args(t)
    if what == "tokens":
        bigger = (tokens + extra, pairs, max(seqs, 1), dec, ctx)
        seqs = max(seqs, 1) if tokens else seqs
    elif what == "pairs":
        bigger = (tokens, pairs + extra * 100.0 if seqs else pairs, seqs, dec, ctx)
    elif what == "decode":
        bigger = (tokens, pairs, seqs, dec + extra, ctx + extra * 100)
    else:
        bigger = (tokens, pairs, seqs, dec, ctx + extra * 100 if dec else ctx)
    a = pm.step(tokens, pairs, seqs, dec, ctx)
    b = pm.step(*bigger)
    assert b.duration_s >= a.duration_s
    assert b.sm_busy_s >= a.sm_busy_s
    assert b.dram_bytes >= a.dram_bytes
    for c in (a, b):
        assert isinstance(c, StepCost)
        assert 0.0 <= c.overhead_s <= c.duration_s
        assert 0.0 <= c.sm_busy_s <= c.duration_s


def test_empty_batch_costs_nothing() -> None:
    assert get_perf_model("llama-3-8b", "h100", 1).step(0, 0.0, 0, 0, 0) == StepCost(0.0, 0.0, 0.0, 0.0)


def test_gpu_utilisation_low_for_decode_high_for_big_prefill() -> None:
    pm = get_perf_model("llama-3-8b", "h100", 1)
    dec = pm.step(0, 0.0, 0, 32, 32 * 1000)
    assert dec.sm_busy_s / dec.duration_s < 0.4
    pre = pm.step(4096, 4096 * 4097 / 2.0, 1, 0, 0)
    assert pre.sm_busy_s / pre.duration_s > 0.6
    assert pre.duration_s > dec.duration_s


def test_decode_reads_the_weights_once_per_step() -> None:
    pm = get_perf_model("llama-3-8b", "h100", 1)
    one = pm.decode(1, 0)
    # ~15 GB of matmul weights + LM head stream every step, whatever the batch.
    assert 14.5e9 < one.dram_bytes < 16.5e9
    aff = pm.decode_affine(8)
    # The cache holds 128 KiB per token; the decode kernel reads a KV head once per query head
    # sharing it (4 for Llama-3-8B), the engine's fitted share of those re-reads reaching HBM.
    assert pm.kv_bytes_per_token == 131_072
    reread = pm.coeffs.stack(None).gqa_kv_reread
    assert aff.bytes_per_ctx == pytest.approx(131_072 * (1 + reread * 3))
    mha = get_perf_model("llama-2-7b", "h100", 1)
    assert mha.decode_affine(8).bytes_per_ctx == mha.kv_bytes_per_token == 524_288


def test_llama3_8b_h100_kv_capacity() -> None:
    pm = get_perf_model("llama-3-8b", "h100", 1)
    # 0.9 x 85.5 GB - 16.1 GB of weights - ~2 GB reserve = ~59 GB at 128 KiB per token.
    tokens = pm.kv_capacity_tokens()
    assert 430_000 <= tokens <= 470_000
    assert pm.kv_capacity_blocks() == tokens // 16
    assert pm.kv_capacity_blocks(block_size=32) == tokens // 32
    assert pm.kv_capacity_blocks(0.5) < pm.kv_capacity_blocks(0.9)


def test_model_that_does_not_fit_names_the_tp_to_use() -> None:
    pm = get_perf_model("llama-2-70b", "a100", 1)
    with pytest.raises(ConfigError, match=r"138 GB of weights.*--tp 2 or more"):
        pm.kv_capacity_blocks()
    assert get_perf_model("llama-2-70b", "a100", 4).kv_capacity_blocks() > 0
    with pytest.raises(ConfigError):
        pm.kv_capacity_blocks(gpu_memory_utilization=1.5)
    with pytest.raises(ConfigError):
        get_perf_model("llama-3-8b", "h100", 1).kv_capacity_blocks(block_size=0)


def test_batch_one_decode_streams_the_weights() -> None:
    # vLLM with CUDA graphs decodes Llama-2-7B on one H100 at ~7.3 ms per output token at batch 1
    # (shared/data/calibration/argonne). Llama-3-8B streams 15.0 GB of matmul and LM-head weights
    # (Llama-2-7B: 13.2 GB): at 3.35 TB/s that alone is 4.5 ms; CPU and kernel overheads add ~2.5.
    pm = get_perf_model("llama-3-8b", "h100", 1)
    weights_s = 15.0e9 / 3.35e12
    for b in (1, 2, 4):
        d = pm.decode(b, 1000).duration_s
        assert weights_s < d < 9.0e-3, (b, d)
    # Decode is launched as a CUDA graph: no kernel-launch stall even at batch 1.
    assert pm.decode(1, 1000).overhead_s < 2e-3


@pytest.mark.parametrize("gpu", ["h100", "a100-40gb", "a100"])
def test_tensor_parallelism_speeds_up_a_small_model(gpu: str) -> None:
    # Measured (argonne): vLLM, Llama-2-7B, batch 1: H100 7.3 / 6.2 / 5.9 ms per token at TP 1 / 2 / 4;
    # A100-40GB 12.9 / 8.5 / 6.3. Each GPU streams 1/tp of the weights; the all-reduces cost less.
    steps = [get_perf_model("llama-3-8b", gpu, tp).decode(1, 500).duration_s for tp in (1, 2, 4)]
    assert steps[0] > steps[1] > steps[2], steps


def test_capacity_helpers() -> None:
    pm = get_perf_model("llama-3-8b", "h100", 1)
    b = pm.max_decode_batch_for_tpot(0.050, 1000)
    assert b > 1
    assert pm.decode(b, 1000).duration_s <= 0.050
    assert pm.decode(b + 1, 1000).duration_s > 0.050
    assert pm.max_decode_batch_for_tpot(0.100, 1000) >= b
    assert pm.max_decode_batch_for_tpot(1e-4, 1000) == 0
    # Capped by KV capacity: 450k tokens / 100k context = 4 sequences.
    assert pm.max_decode_batch_for_tpot(10.0, 100_000) == pm.kv_capacity_tokens() // 100_000
    assert pm.decode_throughput(64, 1000) > pm.decode_throughput(8, 1000) > 0
    assert pm.decode_throughput(0, 1000) == 0.0
    whole = pm.prefill_capacity_tokens_s(chunk_tokens=8192, prompt_tokens=2048)
    chunked = pm.prefill_capacity_tokens_s(chunk_tokens=512, prompt_tokens=2048)
    assert whole > chunked > 0  # chunking pays per-iteration overheads
    assert pm.weights_bytes_per_gpu == pytest.approx(16.06e9, rel=0.001)


def test_tensor_parallelism_shards_weights_and_kv() -> None:
    tp1 = get_perf_model("llama-3-70b", "h100", 4)
    tp2 = get_perf_model("llama-3-70b", "h100", 8)
    assert tp2.weights_bytes_per_gpu == pytest.approx(tp1.weights_bytes_per_gpu / 2)
    assert tp2.kv_bytes_per_token == pytest.approx(tp1.kv_bytes_per_token / 2)
    # Prefill gets faster with more GPUs.
    assert tp2.prefill(4096).duration_s < tp1.prefill(4096).duration_s


def test_get_perf_model_is_memoised_and_validates() -> None:
    assert get_perf_model("llama-3-8b", "h100", 1) is get_perf_model("meta-llama/Meta-Llama-3-8B", "H100", 1)
    with pytest.raises(ConfigError):
        get_perf_model("llama-3-8b", "h100", 3)
    with pytest.raises(ConfigError):
        get_perf_model("llama-3-8b", "tpu", 1)
    with pytest.raises(ConfigError):
        PerfModel("llama-3-8b", "h100", 1, stack="tgi")
    assert "llama-3-8b" in repr(get_perf_model("llama-3-8b", "h100", 1))
    np = pytest.importorskip("numpy")
    assert get_perf_model("llama-3-8b", "h100", np.int64(2)) is get_perf_model("llama-3-8b", "h100", 2)


def test_import_has_no_side_effects() -> None:
    code = (
        "import sys\n"
        "import llmscale.perf as p\n"
        "from llmscale.perf.coefficients import load_coefficients\n"
        "assert load_coefficients.cache_info().currsize == 0, 'coefficients read at import'\n"
        "assert 'scipy' not in sys.modules and 'numpy' not in sys.modules, 'heavy imports'\n"
        "assert sorted(p.__all__) == sorted(set(p.__all__))\n"
        "p.get_perf_model('llama-3-8b', 'h100', 1)\n"
        "assert load_coefficients.cache_info().currsize == 1\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_committed_coefficients_are_packaged_and_round_trip() -> None:
    text = resources.files("llmscale.perf").joinpath("coefficients.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    assert {"fitted_on", "sources", "errors", "split", "model"} <= set(doc)
    c = load_coefficients()
    again = coefficients_from_dict(coefficients_to_dict(c))
    assert again.families == c.families
    assert again.stacks == c.stacks
    assert replace(again, meta={}) == replace(c, meta={})
    for fam in c.families.values():
        assert 0 < fam.gemm_flops_eff <= 1 and 0 < fam.weight_bw_eff <= 1
        assert set(fam.allreduce_latency_s) == {2, 4, 8}


def test_malformed_coefficients_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="malformed"):
        coefficients_from_dict({"model": {"families": {}}})
    c = load_coefficients()
    no_h100 = replace(c, families={"a100": c.families["a100"]})
    with pytest.raises(ConfigError, match="h100"):
        PerfModel("llama-3-8b", "h100", 1, no_h100)
