"""Fitted coefficients of the step-time model and their JSON (de)serialisation.

The numbers themselves live in ``coefficients.json`` next to this file,
written by ``scripts/fit_perf.py`` from the calibration measurements; this
module only gives them types. ``load_coefficients()`` reads the packaged file
lazily (first call) through :mod:`importlib.resources`, so importing
:mod:`llmscale.perf` reads no file and needs no ``../shared`` directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from llmscale.errors import ConfigError

__all__ = [
    "COEFFICIENTS_FILE",
    "FamilyCoefficients",
    "PerfCoefficients",
    "StackCoefficients",
    "coefficients_from_dict",
    "coefficients_to_dict",
    "load_coefficients",
]

COEFFICIENTS_FILE = "coefficients.json"


@dataclass(frozen=True, slots=True)
class FamilyCoefficients:
    """Efficiencies of one GPU family (A100 or H100/H200), as fractions of data-sheet peaks.

    All times in seconds, bandwidths in bytes/s.
    """

    #: Fraction of dense bf16 peak that large GEMMs reach (compute-bound regime).
    gemm_flops_eff: float
    #: Fraction of HBM bandwidth reached while streaming weights (small-batch regime).
    weight_bw_eff: float
    #: Fixed time of one GEMM kernel (launch latency, tail wave), s.
    gemm_kernel_s: float
    #: Fraction of HBM bandwidth reached by element-wise kernels (norms, RoPE, SiLU, residual).
    act_bw_eff: float
    #: Fixed time of one element-wise kernel, s.
    elementwise_kernel_s: float
    #: All-reduce latency (s) by TP degree: time of a tiny all-reduce.
    allreduce_latency_s: Mapping[int, float]
    #: All-reduce algorithm bandwidth (payload bytes / s) by TP degree.
    allreduce_bw_bytes_s: Mapping[int, float]
    #: Host time to issue one transformer layer's kernels (eager PyTorch), s.
    #: The GPU stalls when this exceeds the layer's GPU time (small batches).
    launch_per_layer_s: float
    #: Fraction of the kernel-profile FLOP rate sustained in a serving run (power and
    #: clock limits under continuous load; the profiles time short bursts).
    serving_flops_scale: float = 1.0
    #: Board power (W) at which ``serving_flops_scale`` holds; a GPU of the family with
    #: another power limit sustains a tensor-core clock (tdp / this)^(1/3) of it (see
    #: ``llmscale.perf.step_time``); 0 = no power scaling.
    reference_power_w: float = 0.0


@dataclass(frozen=True, slots=True)
class StackCoefficients:
    """Serial per-iteration costs of a serving stack beyond the measured CPU phases, s."""

    #: Fixed cost per engine iteration.
    iter_s: float
    #: Cost per sequence in the batch (per-sequence Python work, sampling, detokenising).
    per_seq_s: float
    #: Extra fixed cost of an iteration that contains a prefill chunk.
    prefill_iter_s: float
    #: Decode-only iterations of up to this many sequences replay a captured CUDA graph and
    #: never wait on kernel launches (vLLM captures batch sizes up to 256 unless run with
    #: ``--enforce-eager``); 0 = an eager engine that launches every kernel from Python.
    cuda_graph_max_batch: int = 0
    #: Share of the per-kernel fixed times (fitted to eager kernel profiles) that a decode
    #: iteration replayed as a CUDA graph still pays: the host no longer launches each kernel.
    graph_kernel_scale: float = 1.0
    #: Latency of one tensor-parallel all-reduce of a small activation, s, when the engine runs
    #: its own all-reduce kernel over NVLink instead of NCCL for small messages (vLLM's custom
    #: all-reduce, on by default since 0.3); 0 = NCCL's fitted latency for the TP degree.
    allreduce_latency_s: float = 0.0
    #: Sampling work per sequence per vocabulary entry, s: the logits of every sequence are
    #: soft-maxed and sorted for top-p / top-k, so a 152k-token vocabulary (Qwen2) costs ~4.75x
    #: a 32k one (Llama-2) at the same batch.
    sample_s_per_logit: float = 0.0
    #: Sampling work per iteration per vocabulary entry, s, whatever the batch: the sampler's
    #: row-wise kernels (softmax, log-softmax, argmax, ranks over the vocabulary) run one thread
    #: block per sequence, so up to a GPU's SM count (108 on A100, 132 on H100) the rows run side
    #: by side and an iteration pays the time of one row, latency-bound on a single SM.
    sample_s_per_vocab: float = 0.0
    #: Extra latency of the engine's all-reduce per GPU beyond two in the TP group, s: a one-shot
    #: all-reduce signals and reads every peer, so a TP-4 all-reduce waits on three peers, not one.
    allreduce_peer_s: float = 0.0
    #: Share of a grouped-query model's KV re-reads (one per query head sharing a KV head) that
    #: reach HBM in the engine's decode attention kernel: 0 = each KV head read once.
    gqa_kv_reread: float = 0.0
    #: The engine's own loss of compute per extra GPU of a TP group (how well it overlaps its
    #: all-reduces); None = :attr:`PerfCoefficients.tp_compute_penalty`.
    tp_compute_penalty: float | None = None


@dataclass(frozen=True, slots=True)
class PerfCoefficients:
    """Every fitted number the step-time model uses.

    ``families`` is keyed by :attr:`GpuSpec.family`. Attention and CPU
    coefficients are shared by all GPUs (the attention kernel and CPU-overhead
    profiles exist for A100 only; they are fractions of each GPU's own peak).
    """

    families: Mapping[str, FamilyCoefficients]
    #: Exponent p of the roofline blend (t_compute^p + t_memory^p)^(1/p); large p -> max().
    gemm_blend_exp: float
    #: Fraction of dense peak reached by prefill (FlashAttention) attention FLOPs.
    attn_prefill_flops_eff: float
    #: Fraction of HBM bandwidth reached by decode attention reading the KV cache.
    attn_kv_bw_eff: float
    #: Fixed time of one attention kernel call, per layer, s.
    attn_kernel_s: float
    #: Measured CPU phases (schedule, prepare inputs, sampler, process outputs): fixed part, s.
    cpu_iter_s: float
    #: ... per sequence in the batch, s.
    cpu_per_seq_s: float
    #: ... extra with tensor parallelism (broadcast of inputs to the workers), s.
    cpu_tp_s: float
    stacks: Mapping[str, StackCoefficients]
    #: Loss of compute throughput per extra GPU of a TP group in a full forward pass
    #: (ranks wait for the slowest at 2 syncs a layer): FLOP time x (1 + penalty x (tp - 1)).
    tp_compute_penalty: float = 0.0
    default_stack: str = "vllm"
    #: Host CPU time relative to the x86 hosts the CPU-phase and engine rows were measured on,
    #: by :attr:`GpuSpec.host_cpu` ("grace": GH200's Arm Neoverse V2). It multiplies every
    #: host-side term of an iteration (CPU phases, engine loop, per-sequence work, prefill
    #: set-up, eager kernel launches), not the sampler's GPU kernels. A host absent here is 1.
    host_time_scale: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    #: Free-form provenance (fit date, sources, held-out errors); not used by the model.
    meta: Mapping[str, Any] = field(default_factory=dict)

    def family(self, name: str) -> FamilyCoefficients:
        """Coefficients of a GPU family, ``ConfigError`` if the fit has none."""
        fam = self.families.get(name)
        if fam is None:
            raise ConfigError(
                f"no fitted coefficients for GPU family {name!r}; fitted: {', '.join(sorted(self.families))}"
            )
        return fam

    def host_scale(self, host_cpu: str) -> float:
        """Host time of ``host_cpu`` relative to an x86 host (1 for any host the fit has no factor for)."""
        return float(self.host_time_scale.get(host_cpu, 1.0))

    def stack(self, name: str | None) -> StackCoefficients:
        """Coefficients of a serving stack (default :attr:`default_stack`)."""
        key = self.default_stack if name is None else name
        st = self.stacks.get(key)
        if st is None:
            raise ConfigError(f"stack = {key!r} is unknown; fitted stacks: {', '.join(sorted(self.stacks))}")
        return st


def _family_from_dict(d: Mapping[str, Any]) -> FamilyCoefficients:
    return FamilyCoefficients(
        gemm_flops_eff=float(d["gemm_flops_eff"]),
        weight_bw_eff=float(d["weight_bw_eff"]),
        gemm_kernel_s=float(d["gemm_kernel_s"]),
        act_bw_eff=float(d["act_bw_eff"]),
        elementwise_kernel_s=float(d["elementwise_kernel_s"]),
        allreduce_latency_s=MappingProxyType({int(k): float(v) for k, v in d["allreduce_latency_s"].items()}),
        allreduce_bw_bytes_s=MappingProxyType(
            {int(k): float(v) for k, v in d["allreduce_bw_bytes_s"].items()}
        ),
        launch_per_layer_s=float(d["launch_per_layer_s"]),
        serving_flops_scale=float(d.get("serving_flops_scale", 1.0)),
        reference_power_w=float(d.get("reference_power_w", 0.0)),
    )


def _host_scales(d: Mapping[str, Any]) -> Mapping[str, float]:
    out = {str(k): float(v) for k, v in d.items()}
    for k, v in out.items():
        # A host does the same work in a positive time; 0 would make its Python free.
        if not 0.0 < v < float("inf"):
            raise ConfigError(f"performance coefficients: host_time_scale.{k} = {v}, must be > 0")
    return MappingProxyType(out)


def coefficients_from_dict(d: Mapping[str, Any]) -> PerfCoefficients:
    """Build :class:`PerfCoefficients` from the JSON structure of ``coefficients.json``."""
    try:
        model = d["model"]
        return PerfCoefficients(
            families=MappingProxyType({k: _family_from_dict(v) for k, v in model["families"].items()}),
            gemm_blend_exp=float(model["gemm_blend_exp"]),
            attn_prefill_flops_eff=float(model["attn_prefill_flops_eff"]),
            attn_kv_bw_eff=float(model["attn_kv_bw_eff"]),
            attn_kernel_s=float(model["attn_kernel_s"]),
            cpu_iter_s=float(model["cpu_iter_s"]),
            cpu_per_seq_s=float(model["cpu_per_seq_s"]),
            cpu_tp_s=float(model["cpu_tp_s"]),
            stacks=MappingProxyType(
                {
                    k: StackCoefficients(
                        iter_s=float(v["iter_s"]),
                        per_seq_s=float(v["per_seq_s"]),
                        prefill_iter_s=float(v["prefill_iter_s"]),
                        cuda_graph_max_batch=int(v.get("cuda_graph_max_batch", 0)),
                        allreduce_latency_s=float(v.get("allreduce_latency_s", 0.0)),
                        graph_kernel_scale=float(v.get("graph_kernel_scale", 1.0)),
                        sample_s_per_logit=float(v.get("sample_s_per_logit", 0.0)),
                        sample_s_per_vocab=float(v.get("sample_s_per_vocab", 0.0)),
                        allreduce_peer_s=float(v.get("allreduce_peer_s", 0.0)),
                        gqa_kv_reread=float(v.get("gqa_kv_reread", 0.0)),
                        tp_compute_penalty=(
                            None if v.get("tp_compute_penalty") is None else float(v["tp_compute_penalty"])
                        ),
                    )
                    for k, v in model["stacks"].items()
                }
            ),
            tp_compute_penalty=float(model.get("tp_compute_penalty", 0.0)),
            default_stack=str(model.get("default_stack", "vllm")),
            host_time_scale=_host_scales(model.get("host_time_scale", {})),
            meta=MappingProxyType({k: v for k, v in d.items() if k != "model"}),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"performance coefficients are malformed: {exc!r}") from exc


def coefficients_to_dict(c: PerfCoefficients) -> dict[str, Any]:
    """Inverse of :func:`coefficients_from_dict` (``meta`` goes to the top level)."""
    model: dict[str, Any] = {
        "families": {
            name: {
                "gemm_flops_eff": f.gemm_flops_eff,
                "weight_bw_eff": f.weight_bw_eff,
                "gemm_kernel_s": f.gemm_kernel_s,
                "act_bw_eff": f.act_bw_eff,
                "elementwise_kernel_s": f.elementwise_kernel_s,
                "allreduce_latency_s": {str(k): v for k, v in sorted(f.allreduce_latency_s.items())},
                "allreduce_bw_bytes_s": {str(k): v for k, v in sorted(f.allreduce_bw_bytes_s.items())},
                "launch_per_layer_s": f.launch_per_layer_s,
                "serving_flops_scale": f.serving_flops_scale,
                "reference_power_w": f.reference_power_w,
            }
            for name, f in sorted(c.families.items())
        },
        "gemm_blend_exp": c.gemm_blend_exp,
        "attn_prefill_flops_eff": c.attn_prefill_flops_eff,
        "attn_kv_bw_eff": c.attn_kv_bw_eff,
        "attn_kernel_s": c.attn_kernel_s,
        "cpu_iter_s": c.cpu_iter_s,
        "cpu_per_seq_s": c.cpu_per_seq_s,
        "cpu_tp_s": c.cpu_tp_s,
        "stacks": {
            name: {
                "iter_s": s.iter_s,
                "per_seq_s": s.per_seq_s,
                "prefill_iter_s": s.prefill_iter_s,
                "cuda_graph_max_batch": s.cuda_graph_max_batch,
                "allreduce_latency_s": s.allreduce_latency_s,
                "graph_kernel_scale": s.graph_kernel_scale,
                "sample_s_per_logit": s.sample_s_per_logit,
                "sample_s_per_vocab": s.sample_s_per_vocab,
                "allreduce_peer_s": s.allreduce_peer_s,
                "gqa_kv_reread": s.gqa_kv_reread,
                "tp_compute_penalty": s.tp_compute_penalty,
            }
            for name, s in sorted(c.stacks.items())
        },
        "tp_compute_penalty": c.tp_compute_penalty,
        "default_stack": c.default_stack,
        "host_time_scale": dict(sorted(c.host_time_scale.items())),
    }
    out: dict[str, Any] = dict(c.meta)
    out["model"] = model
    return out


@cache
def load_coefficients() -> PerfCoefficients:
    """The committed coefficients (``llmscale/perf/coefficients.json``), read once on first use."""
    text = resources.files("llmscale.perf").joinpath(COEFFICIENTS_FILE).read_text(encoding="utf-8")
    return coefficients_from_dict(json.loads(text))
