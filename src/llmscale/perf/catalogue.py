"""Catalogue of model architectures and GPUs the performance model knows.

Every number here is a public fact, cited next to it: architecture facts come
from each model's Hugging Face ``config.json``, hardware facts from NVIDIA's
data sheets. Nothing in this file is fitted; fitted efficiencies live in
``coefficients.json`` (see :mod:`llmscale.perf.step_time`).

Look-ups accept short names (``llama-3-8b``), Hugging Face ids
(``meta-llama/Meta-Llama-3-8B``) and a few common spellings, case-insensitively.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from numbers import Integral
from types import MappingProxyType
from typing import Final, TypeVar

from llmscale.errors import ConfigError

__all__ = [
    "GPUS",
    "HOST_CPUS",
    "MODELS",
    "SUPPORTED_TP",
    "GpuSpec",
    "ModelSpec",
    "get_gpu",
    "get_model",
    "validate_tp",
]

#: Tensor-parallel degrees the model supports: one node of up to 8 GPUs.
SUPPORTED_TP: Final[tuple[int, ...]] = (1, 2, 4, 8)
#: Kinds of host CPU a GPU's serving engine runs on (:attr:`GpuSpec.host_cpu`).
HOST_CPUS: Final[tuple[str, ...]] = ("x86", "grace")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer, as far as serving cost is concerned.

    ``param_count`` is the published total (embeddings included); the
    per-layer linear-layer parameter count used for FLOPs is derived from the
    shape fields so that it stays consistent with them.
    """

    name: str
    hf_id: str
    aliases: tuple[str, ...]
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    param_count: int
    bytes_per_param: int = 2
    #: SwiGLU-style MLP (gate, up and down projections) vs a plain 2-matrix MLP (BLOOM).
    gated_mlp: bool = True
    #: Longest sequence the model was trained for (config.json max_position_embeddings).
    max_context_tokens: int = 4096
    #: Mixture of experts: MLP experts per layer (config.json num_local_experts; 1 = dense).
    num_experts: int = 1
    #: ... of which each token is routed through this many (num_experts_per_tok).
    experts_per_token: int = 1

    @property
    def attn_params_per_layer(self) -> int:
        """Weights of one layer's attention projections (QKV and output), all TP shards together."""
        q_dim = self.num_heads * self.head_dim
        kv_dim = self.num_kv_heads * self.head_dim
        return self.hidden_size * (q_dim + 2 * kv_dim) + q_dim * self.hidden_size

    @property
    def expert_params(self) -> int:
        """Weights of one MLP (one expert of a mixture), e.g. Llama-3-8B: 3 x 4096 x 14,336 = 176.2M."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of the matmuls of one layer (QKV, output projection, every expert's MLP), all TP shards."""
        return self.attn_params_per_layer + self.num_experts * self.expert_params

    @property
    def active_linear_params_per_layer(self) -> int:
        """Matmul weights one token passes through in one layer: attention + its ``experts_per_token`` MLPs.

        Equal to :attr:`linear_params_per_layer` for a dense model. Mixtral-8x7B:
        41.9M + 2 x 176.2M = 394.3M of the layer's 1,451.2M.
        """
        return self.attn_params_per_layer + self.experts_per_token * self.expert_params

    @property
    def weights_bytes(self) -> int:
        """Bytes of all weights at ``bytes_per_param`` (bf16: 2), e.g. Llama-3-8B: 8.03e9 x 2 = 16.1 GB."""
        return self.param_count * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes of one token over all layers and all TP shards.

        K and V, each ``num_kv_heads * head_dim`` values per layer, at
        ``bytes_per_param`` bytes: Llama-3-8B = 2 x 32 x 8 x 128 x 2 = 131,072 B
        (128 KiB); Llama-2-7B (no GQA) = 512 KiB.
        """
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_param


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU's data-sheet figures.

    ``family`` groups GPUs that share fitted efficiency coefficients (same SM
    generation and NVLink generation): A100 SXM and PCIe are ``"a100"``, H100
    and H200 are ``"h100"``; the L40S is ``"ada"`` (priors, not fitted).
    """

    name: str
    aliases: tuple[str, ...]
    family: str
    #: Dense (not 2:4 sparse) bf16 tensor-core FLOP/s.
    peak_bf16_flops: float
    hbm_bandwidth_bytes_s: float
    #: Device memory as the driver reports it (nvidia-smi "Total"), in bytes.
    memory_bytes: int
    #: NVLink bandwidth per GPU, one direction, bytes/s; 0 = none (PCIe only: the L40S).
    nvlink_bandwidth_bytes_s: float
    #: Board power (W), informational.
    tdp_w: float
    #: Dense FP8 tensor-core FLOP/s; 0 for a GPU without FP8 tensor cores (Ampere: an FP8
    #: checkpoint runs weight-only there, its GEMMs at the bf16 rate; see precision.py).
    peak_fp8_flops: float = 0.0
    #: The CPU the serving engine's Python runs on (scheduler, input preparation, kernel
    #: launches): one of :data:`HOST_CPUS`. "x86" is the host of every DGX/HGX board and PCIe
    #: server the fit's rows ran on; a GH200 superchip's host is its own Grace CPU ("grace", Arm
    #: Neoverse V2). The fitted ``host_time_scale`` of the coefficients prices the difference.
    host_cpu: str = "x86"

    def __post_init__(self) -> None:
        if self.host_cpu not in HOST_CPUS:
            raise ConfigError(
                f"gpu {self.name!r}: host_cpu = {self.host_cpu!r}, must be one of {', '.join(HOST_CPUS)}"
            )


_MIB: Final = 1024 * 1024

# -- GPUs -------------------------------------------------------------------
# A100 SXM4 80GB: NVIDIA A100 data sheet: 312 TFLOP/s bf16 dense tensor core,
# 2,039 GB/s HBM2e, NVLink 3 600 GB/s total (300 GB/s each way), 400 W.
# nvidia-smi reports 81,920 MiB.
_A100_SXM = GpuSpec(
    name="a100-80gb",
    aliases=("a100", "a100-sxm", "a100-80gb-sxm", "a100-sxm4-80gb", "nvidia-a100-80gb", "a100-80g"),
    family="a100",
    peak_bf16_flops=312e12,
    hbm_bandwidth_bytes_s=2.039e12,
    memory_bytes=81_920 * _MIB,
    nvlink_bandwidth_bytes_s=300e9,
    tdp_w=400.0,
)
# A100 PCIe 80GB: same data sheet: 312 TFLOP/s bf16, 1,935 GB/s, 300 W; NVLink
# bridge between pairs, 600 GB/s total. Used by the Sarathi-Serve artifacts.
_A100_PCIE = GpuSpec(
    name="a100-80gb-pcie",
    aliases=("a100-pcie", "a100-pcie-80gb"),
    family="a100",
    peak_bf16_flops=312e12,
    hbm_bandwidth_bytes_s=1.935e12,
    memory_bytes=81_920 * _MIB,
    nvlink_bandwidth_bytes_s=300e9,
    tdp_w=300.0,
)
# A100 SXM4 40GB: same data sheet: 312 TFLOP/s bf16 dense, 1,555 GB/s HBM2, 40 GB,
# NVLink 3, 400 W; nvidia-smi reports 40,960 MiB. The card of many HPC systems (the
# Argonne end-to-end measurements in shared/data/calibration/argonne ran on it): a third
# less bandwidth than the 80 GB card, so a weight-streaming decode step is ~1.3x slower,
# and half the memory for the KV cache.
_A100_40GB = GpuSpec(
    name="a100-40gb",
    aliases=("a100-sxm4-40gb", "a100-40g", "nvidia-a100-40gb", "a100-40gb-sxm"),
    family="a100",
    peak_bf16_flops=312e12,
    hbm_bandwidth_bytes_s=1.555e12,
    memory_bytes=40_960 * _MIB,
    nvlink_bandwidth_bytes_s=300e9,
    tdp_w=400.0,
)
# H100 SXM5 80GB: NVIDIA H100 data sheet: 989 TFLOP/s bf16 dense (1,979 with
# sparsity), 1,979 TFLOP/s FP8 dense (3,958 with sparsity), 3.35 TB/s HBM3,
# NVLink 4 900 GB/s total (450 each way), 700 W.
# nvidia-smi reports 81,559 MiB.
_H100_SXM = GpuSpec(
    name="h100-80gb",
    aliases=("h100", "h100-sxm", "h100-80gb-sxm", "h100-sxm5-80gb", "nvidia-h100-80gb", "h100-80g"),
    family="h100",
    peak_bf16_flops=989e12,
    hbm_bandwidth_bytes_s=3.35e12,
    memory_bytes=81_559 * _MIB,
    nvlink_bandwidth_bytes_s=450e9,
    tdp_w=700.0,
    peak_fp8_flops=1979e12,
)
# H200 SXM 141GB: NVIDIA H200 data sheet: same GH100 die as H100 (989 TFLOP/s
# bf16 dense, 1,979 FP8 dense), 4.8 TB/s HBM3e, 141 GB, NVLink 4 900 GB/s total, 700 W.
# nvidia-smi reports 143,771 MiB.
_H200 = GpuSpec(
    name="h200",
    aliases=("h200-141gb", "h200-sxm", "nvidia-h200"),
    family="h100",
    peak_bf16_flops=989e12,
    hbm_bandwidth_bytes_s=4.8e12,
    memory_bytes=143_771 * _MIB,
    nvlink_bandwidth_bytes_s=450e9,
    tdp_w=700.0,
    peak_fp8_flops=1979e12,
)
# GH200 Grace Hopper Superchip, 96 GB HBM3 variant: NVIDIA GH200 data sheet: the H100's
# GH100 die (989 TFLOP/s bf16 dense, 1,979 FP8), 4.0 TB/s HBM3, 96 GB, 900 GB/s NVLink-C2C to the
# Grace CPU, up to 1,000 W for the module. Memory taken as the data sheet's 96 GB.
_GH200 = GpuSpec(
    name="gh200",
    aliases=("gh200-96gb", "nvidia-gh200", "grace-hopper"),
    family="h100",
    peak_bf16_flops=989e12,
    hbm_bandwidth_bytes_s=4.0e12,
    memory_bytes=96_000_000_000,
    nvlink_bandwidth_bytes_s=450e9,
    tdp_w=1000.0,
    peak_fp8_flops=1979e12,
    host_cpu="grace",
)

# L40S (Ada Lovelace, AD102, sm_89): NVIDIA L40S data sheet (PB-11349, 2023): 48 GB GDDR6 with
# ECC, 864 GB/s, BF16/FP16 tensor core 362.05 TFLOP/s dense (733 with sparsity), FP8 733 TFLOP/s
# dense (1,466 with sparsity), PCIe Gen4 x16 (64 GB/s both ways, 32 each), no NVLink, 350 W.
# Memory taken as the data sheet's 48 GB. No L40S measurement is fitted: its efficiencies are
# the "ada" family's priors (llmscale.offline.perf_fit.ADA_PRIOR; docs/gpu-mix.md).
_L40S = GpuSpec(
    name="l40s",
    aliases=("l40s-48gb", "nvidia-l40s", "l40s-pcie"),
    family="ada",
    peak_bf16_flops=362.05e12,
    hbm_bandwidth_bytes_s=864e9,
    memory_bytes=48_000_000_000,
    nvlink_bandwidth_bytes_s=0.0,
    tdp_w=350.0,
    peak_fp8_flops=733e12,
)

# -- Models -----------------------------------------------------------------
# Shapes and max_position_embeddings from each model's config.json on the
# Hugging Face Hub; parameter counts from the model cards (equal, to 0.01 %,
# to the count the shapes give).
_LLAMA2_7B = ModelSpec(
    name="llama-2-7b",
    hf_id="meta-llama/Llama-2-7b-hf",
    aliases=("llama2-7b", "meta-llama/Llama-2-7b-chat-hf", "Llama-2-7b-hf", "Llama-2-7b-chat-hf"),
    num_layers=32,
    hidden_size=4096,
    num_heads=32,
    num_kv_heads=32,
    head_dim=128,
    intermediate_size=11008,
    vocab_size=32000,
    param_count=6_738_415_616,
)
_LLAMA2_13B = ModelSpec(
    name="llama-2-13b",
    hf_id="meta-llama/Llama-2-13b-hf",
    aliases=("llama2-13b", "meta-llama/Llama-2-13b-chat-hf", "Llama-2-13b-hf", "Llama-2-13b-chat-hf"),
    num_layers=40,
    hidden_size=5120,
    num_heads=40,
    num_kv_heads=40,
    head_dim=128,
    intermediate_size=13824,
    vocab_size=32000,
    param_count=13_015_864_320,
)
_LLAMA3_8B = ModelSpec(
    name="llama-3-8b",
    hf_id="meta-llama/Meta-Llama-3-8B",
    aliases=(
        "llama3-8b",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "Meta-Llama-3-8B",
    ),
    num_layers=32,
    hidden_size=4096,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=128256,
    param_count=8_030_261_248,
    max_context_tokens=8192,
)
# Llama-3.1-8B: Llama-3-8B's shapes with a 128k context (RoPE scaling).
_LLAMA31_8B = replace(
    _LLAMA3_8B,
    name="llama-3.1-8b",
    hf_id="meta-llama/Llama-3.1-8B",
    aliases=(
        "llama3.1-8b",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
    ),
    max_context_tokens=131072,
)
_MISTRAL_7B = ModelSpec(
    name="mistral-7b",
    hf_id="mistralai/Mistral-7B-v0.1",
    aliases=(
        "mistral-7b-v0.1",
        "mistralai/Mistral-7B-Instruct-v0.1",
        "mistralai/Mistral-7B-Instruct-v0.2",
        "mistral-7b-instruct",
    ),
    num_layers=32,
    hidden_size=4096,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=32000,
    param_count=7_241_732_096,
    max_context_tokens=32768,
)
_LLAMA2_70B = ModelSpec(
    name="llama-2-70b",
    hf_id="meta-llama/Llama-2-70b-hf",
    aliases=("llama2-70b", "meta-llama/Llama-2-70b-chat-hf", "Llama-2-70b-hf", "Llama-2-70b-chat-hf"),
    num_layers=80,
    hidden_size=8192,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=28672,
    vocab_size=32000,
    param_count=68_976_648_192,
)
_LLAMA3_70B = ModelSpec(
    name="llama-3-70b",
    hf_id="meta-llama/Meta-Llama-3-70B",
    aliases=(
        "llama3-70b",
        "meta-llama/Meta-Llama-3-70B-Instruct",
        "Meta-Llama-3-70B",
    ),
    num_layers=80,
    hidden_size=8192,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=28672,
    vocab_size=128256,
    param_count=70_553_706_496,
    max_context_tokens=8192,
)
_LLAMA31_70B = replace(
    _LLAMA3_70B,
    name="llama-3.1-70b",
    hf_id="meta-llama/Llama-3.1-70B",
    aliases=(
        "llama3.1-70b",
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Meta-Llama-3.1-70B",
        "meta-llama/Meta-Llama-3.1-70B-Instruct",
    ),
    max_context_tokens=131072,
)
_CODELLAMA_34B = ModelSpec(
    name="codellama-34b",
    hf_id="codellama/CodeLlama-34b-hf",
    aliases=(
        "code-llama-34b",
        "codellama/CodeLlama-34b-Instruct-hf",
        "CodeLlama-34b-Instruct-hf",
        "CodeLlama-34b-hf",
    ),
    num_layers=48,
    hidden_size=8192,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=22016,
    vocab_size=32000,
    param_count=33_743_970_304,
    max_context_tokens=16384,
)
_YI_34B = ModelSpec(
    name="yi-34b",
    hf_id="01-ai/Yi-34B",
    aliases=("01-ai/Yi-34B-200K", "01-ai/Yi-34B-Chat", "yi-34b-200k"),
    num_layers=60,
    hidden_size=7168,
    num_heads=56,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=20480,
    vocab_size=64000,
    param_count=34_388_917_248,
)
# BLOOM-176B: bigscience/bloom config.json: n_layer 70, hidden 14336, n_head 112
# (multi-head attention, ALiBi), 4h = 57,344 GELU MLP, vocab 250,880; 176,247M params.
_BLOOM_176B = ModelSpec(
    name="bloom-176b",
    hf_id="bigscience/bloom",
    aliases=("bloom", "bloom176b"),
    num_layers=70,
    hidden_size=14336,
    num_heads=112,
    num_kv_heads=112,
    head_dim=128,
    intermediate_size=57344,
    vocab_size=250880,
    param_count=176_247_271_424,
    gated_mlp=False,
    max_context_tokens=2048,
)

# Qwen2 / Qwen2.5 (Qwen/Qwen2-7B, Qwen2-72B, Qwen2.5-7B/32B/72B config.json): untied input and
# output embeddings (vocab 152,064), biases on Q/K/V (counted in param_count, not in the matmul
# weights: 0.1% of them). Base models declare max_position_embeddings 131,072; the Qwen2.5
# -Instruct configs declare 32,768 (longer needs YaRN rope scaling set by the operator).
_QWEN2_7B = ModelSpec(
    name="qwen2-7b",
    hf_id="Qwen/Qwen2-7B",
    aliases=("qwen2-7b-base",),
    num_layers=28,
    hidden_size=3584,
    num_heads=28,
    num_kv_heads=4,
    head_dim=128,
    intermediate_size=18944,
    vocab_size=152064,
    param_count=7_615_616_512,
    max_context_tokens=131072,
)
_QWEN2_7B_INSTRUCT = replace(
    _QWEN2_7B, name="qwen2-7b-instruct", hf_id="Qwen/Qwen2-7B-Instruct", aliases=(), max_context_tokens=32768
)
_QWEN2_72B = ModelSpec(
    name="qwen2-72b",
    hf_id="Qwen/Qwen2-72B",
    aliases=("qwen2-72b-base",),
    num_layers=80,
    hidden_size=8192,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=29568,
    vocab_size=152064,
    param_count=72_706_203_648,
    max_context_tokens=131072,
)
_QWEN2_72B_INSTRUCT = replace(
    _QWEN2_72B,
    name="qwen2-72b-instruct",
    hf_id="Qwen/Qwen2-72B-Instruct",
    aliases=(),
    max_context_tokens=32768,
)
_QWEN25_7B = replace(
    _QWEN2_7B, name="qwen2.5-7b", hf_id="Qwen/Qwen2.5-7B", aliases=("qwen2.5-7b-base", "qwen25-7b")
)
_QWEN25_7B_INSTRUCT = replace(
    _QWEN25_7B,
    name="qwen2.5-7b-instruct",
    hf_id="Qwen/Qwen2.5-7B-Instruct",
    aliases=("qwen25-7b-instruct",),
    max_context_tokens=32768,
)
_QWEN25_32B = ModelSpec(
    name="qwen2.5-32b",
    hf_id="Qwen/Qwen2.5-32B",
    aliases=("qwen2.5-32b-base", "qwen25-32b"),
    num_layers=64,
    hidden_size=5120,
    num_heads=40,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=27648,
    vocab_size=152064,
    param_count=32_763_876_352,
    max_context_tokens=131072,
)
_QWEN25_32B_INSTRUCT = replace(
    _QWEN25_32B,
    name="qwen2.5-32b-instruct",
    hf_id="Qwen/Qwen2.5-32B-Instruct",
    aliases=("qwen25-32b-instruct",),
    max_context_tokens=32768,
)
_QWEN25_72B = replace(
    _QWEN2_72B, name="qwen2.5-72b", hf_id="Qwen/Qwen2.5-72B", aliases=("qwen2.5-72b-base", "qwen25-72b")
)
_QWEN25_72B_INSTRUCT = replace(
    _QWEN25_72B,
    name="qwen2.5-72b-instruct",
    hf_id="Qwen/Qwen2.5-72B-Instruct",
    aliases=("qwen25-72b-instruct",),
    max_context_tokens=32768,
)
# Mixtral-8x7B (mistralai/Mixtral-8x7B-v0.1 config.json): Mistral-7B's attention with 8 SwiGLU
# experts per layer, 2 routed per token (num_local_experts 8, num_experts_per_tok 2); 46.7B
# parameters of which 12.9B are active per token.
_MIXTRAL_8X7B = ModelSpec(
    name="mixtral-8x7b",
    hf_id="mistralai/Mixtral-8x7B-v0.1",
    aliases=("mixtral", "mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b-instruct"),
    num_layers=32,
    hidden_size=4096,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=32000,
    param_count=46_702_792_704,
    max_context_tokens=32768,
    num_experts=8,
    experts_per_token=2,
)


_T = TypeVar("_T", ModelSpec, GpuSpec)


def _index(entries: Iterable[tuple[_T, Sequence[str]]]) -> MappingProxyType[str, _T]:
    """Lower-cased look-up keys -> item; a key "org/name" is also reachable as "name"."""
    by_key: dict[str, _T] = {}
    for item, keys in entries:
        for key in keys:
            k = key.lower()
            if k in by_key and by_key[k] is not item:
                raise RuntimeError(f"duplicate catalogue key {key!r}")  # pragma: no cover - static data
            by_key[k] = item
            if "/" in k:
                by_key.setdefault(k.split("/", 1)[1], item)
    return MappingProxyType(by_key)


#: Models by canonical short name.
MODELS: Final[MappingProxyType[str, ModelSpec]] = MappingProxyType(
    {
        m.name: m
        for m in (
            _LLAMA2_7B,
            _LLAMA2_13B,
            _LLAMA3_8B,
            _LLAMA31_8B,
            _MISTRAL_7B,
            _LLAMA2_70B,
            _LLAMA3_70B,
            _LLAMA31_70B,
            _CODELLAMA_34B,
            _YI_34B,
            _BLOOM_176B,
            _QWEN2_7B,
            _QWEN2_7B_INSTRUCT,
            _QWEN2_72B,
            _QWEN2_72B_INSTRUCT,
            _QWEN25_7B,
            _QWEN25_7B_INSTRUCT,
            _QWEN25_32B,
            _QWEN25_32B_INSTRUCT,
            _QWEN25_72B,
            _QWEN25_72B_INSTRUCT,
            _MIXTRAL_8X7B,
        )
    }
)
#: GPUs by canonical short name.
GPUS: Final[MappingProxyType[str, GpuSpec]] = MappingProxyType(
    {g.name: g for g in (_A100_SXM, _A100_PCIE, _A100_40GB, _H100_SXM, _H200, _GH200, _L40S)}
)

_MODEL_KEYS: Final = _index((m, (m.name, m.hf_id, *m.aliases)) for m in MODELS.values())
_GPU_KEYS: Final = _index((g, (g.name, *g.aliases)) for g in GPUS.values())


def get_model(name: str | ModelSpec) -> ModelSpec:
    """Return the :class:`ModelSpec` for a short name or Hugging Face id (case-insensitive).

    Raises :class:`~llmscale.errors.ConfigError` naming the known models when unknown.
    """
    if isinstance(name, ModelSpec):
        return name
    spec = _MODEL_KEYS.get(name.strip().lower())
    if spec is None:
        known = ", ".join(f"{m.name} ({m.hf_id})" for m in MODELS.values())
        raise ConfigError(f"model = {name!r} is unknown; known models: {known}")
    return spec


def get_gpu(name: str | GpuSpec) -> GpuSpec:
    """Return the :class:`GpuSpec` for a GPU name or alias (case-insensitive).

    ``gpu:profile`` names a MIG slice (``h100-80gb:3g.40gb``, :func:`llmscale.perf.mig.slice_gpu_spec`).

    Raises :class:`~llmscale.errors.ConfigError` naming the known GPUs when unknown.
    """
    if isinstance(name, GpuSpec):
        return name
    if ":" in name:
        # A MIG slice, "h100-80gb:3g.40gb": the GPU's figures scaled to the slice's share.
        from llmscale.perf.mig import slice_gpu_spec

        parent, _, profile = name.partition(":")
        return slice_gpu_spec(parent.strip(), profile.strip())
    spec = _GPU_KEYS.get(name.strip().lower())
    if spec is None:
        known = ", ".join(f"{g.name} (aliases: {', '.join(g.aliases)})" for g in GPUS.values())
        raise ConfigError(f"gpu = {name!r} is unknown; known GPUs: {known}")
    return spec


def validate_tp(model: ModelSpec, tp: int) -> None:
    """Check that ``tp`` is supported and divides the model's attention heads.

    vLLM shards query heads and KV heads across the TP ranks, so both counts
    must be multiples of ``tp`` (Llama-3-8B's 8 KV heads allow tp 1, 2, 4, 8).
    """
    if isinstance(tp, bool) or not isinstance(tp, Integral) or int(tp) not in SUPPORTED_TP:
        raise ConfigError(f"tp = {tp!r}, must be one of {', '.join(map(str, SUPPORTED_TP))}")
    if model.num_heads % tp or model.num_kv_heads % tp:
        raise ConfigError(
            f"tp = {tp} does not divide {model.name}'s {model.num_heads} attention heads "
            f"and {model.num_kv_heads} KV heads"
        )
