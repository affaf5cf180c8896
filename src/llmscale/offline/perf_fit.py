"""Fit the step-time coefficients to the calibration points (needs numpy + scipy).

The fit runs in stages, each a small ``scipy.optimize.least_squares`` (trust-region
reflective, bounded) over the points that identify its parameters, with everything fitted
by earlier stages held fixed:

1. per GPU family, the GEMM and element-wise kernels (Vidur's operator profiles): large-GEMM
   FLOP efficiency, weight-stream bandwidth efficiency, fixed time per GEMM kernel,
   element-wise bandwidth efficiency and fixed time per element-wise kernel;
2. per GPU family, NCCL all-reduce latency and bandwidth for TP 2, 4, 8;
3. the attention kernels (prefill FLOP efficiency, decode KV-read efficiency, fixed time);
4. the measured CPU phases of an iteration (fixed, per sequence, extra with TP);
5. the engines, end to end: per family the host time to launch one layer's kernels
   (eager iterations) and the FLOP rate a serving run sustains relative to kernel profiles,
   the TP synchronisation penalty, and per serving stack its fixed, per-sequence and
   prefill-iteration overheads, and the host time of a GH200's Grace CPU relative to the
   x86 hosts of every other row. Fitted jointly on Splitwise's and Sarathi-Serve's step
   times and the Argonne end-to-end latencies of vLLM, which pin the default "vllm" stack
   (CUDA graphs on decode) by makespan, not by operator sums.

Every parameter has hard physical bounds (an efficiency is a fraction of a data-sheet peak, at
most 1; ``serving_flops_scale`` x ``gemm_flops_eff`` too) and a normal prior (centre, width,
reason: :data:`PARAMS`) that enters the cost weakly (:data:`PRIOR_WEIGHT`): it decides only
what the rows leave open. Every stage starts at the priors' centres. Residual = source weight x
soft-L1 of the log ratio ``log(predicted / measured)`` (quadratic up to ~10 %, linear beyond),
each source weighted 1/sqrt(its points) within its stage.

Stages 1-4 are smooth problems in a handful of parameters each, identified by thousands of
kernel timings: one optimum, one start. The engine stage is smooth too (a launch-bound
iteration blends GPU and host time like the roofline, :mod:`llmscale.perf.kernel`, rather than
taking a kinked max()) but has two basins, one per regime of the A100 eager decode rows; it
runs from the starts in :data:`_STARTS` and keeps the lowest cost. The roofline blend exponent
is a fixed constant, not fitted (a free exponent ran to its upper bound: the GEMM profiles want
a near-hard max()).

Each stage reports, per parameter, its Gauss-Newton standard error (``sigma``), the share of
its information each source gives (``determined_by``) and the prior gives (``prior_share``: near
1 = the rows cannot determine it, the prior sets it), and how far the other starts ended from
the optimum in sigmas. docs/performance-model-fit.md describes the method and the priors.

numpy and scipy are imported inside the functions that need them: the run-time package
does not depend on them.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, cast

from llmscale.offline.calibration import SOURCES, CalPoint
from llmscale.perf.coefficients import FamilyCoefficients, PerfCoefficients, StackCoefficients
from llmscale.perf.step_time import PerfModel

__all__ = [
    "ADA_PRIOR",
    "GEMM_BLEND_EXP",
    "LLAMA2_7B_H100_BATCH1_TPOT_MS",
    "PARAMS",
    "PRIOR_WEIGHT",
    "REFERENCE_POWER_W",
    "SARATHI_DECODE_MS",
    "STAGES",
    "Param",
    "anchors",
    "build_document",
    "coefficients_from_vector",
    "error_report",
    "fit_coefficients",
    "predict",
]

_FAMILIES = ("a100", "h100")
_TPS = (2, 4, 8)
_STACKS = ("vllm", "splitwise", "sarathi")
#: Log-ratio beyond which a residual counts linearly rather than quadratically (soft-L1).
_ROBUST_SCALE = 0.1
#: Start points of the engine stage: the prior centres scaled by these factors; the lowest cost
#: wins. The stage has two basins, one per regime of the A100 eager decode rows (Splitwise,
#: Sarathi): GPU-bound from starts up to x1.1 (cost 0.0336) and launch-bound from x1.25 up
#: (cost 0.0284, the optimum; a100.launch_per_layer_s 0.53 ms). x1 lands in the first, x1.5 and
#: x2 in the second, where they agree to 1e-5 of each parameter's uncertainty
#: (tests/perf/test_perf_fidelity.py::test_refit_reproduces_committed_coefficients).
_STARTS = (1.0, 1.5, 2.0)
#: Weight of the priors: a parameter one prior width from its centre adds 0.5 x 0.01^2 = 5e-5
#: to a stage's cost, against 0.004-0.04 for the data: weak, it decides only what the rows leave
#: open (flat directions) and never pulls a parameter the rows determine.
PRIOR_WEIGHT = 0.01
#: Board power (W) of the GPU each family's sustained FLOP rate is fitted for (A100 SXM, H100
#: SXM); a GPU of the family with another power limit runs its tensor cores at a clock
#: (tdp / reference)^(1/3) of it (llmscale.perf.step_time, POWER_CLOCK_EXP).
REFERENCE_POWER_W = {"a100": 400.0, "h100": 700.0}
#: Roofline blend exponent p of (t_compute^p + t_memory^p)^(1/p): fixed, see the module docstring.
GEMM_BLEND_EXP = 20.0
#: vLLM captures CUDA graphs for decode batches of up to 256 sequences (its default
#: max capture size in 2024 releases and in V1 for these batch limits).
VLLM_CUDA_GRAPH_MAX_BATCH = 256


#: The Ada family (L40S, sm_89), which no measurement in ../shared covers: priors, not a fit, written
#: into coefficients.json as constants so that the simulator, calibrate and the bounds treat it as
#: any family. Ada's SM is Ampere's with FP8 tensor cores (same mma.sync GEMM kernels, no TMA or
#: wgmma), so the kernel efficiencies are the A100 family's fitted ones, rounded; the serving FLOP
#: scale is 1 (the kernel profiles' rate: no serving run says otherwise) at the L40S's own 350 W.
#: All-reduce over PCIe Gen4 x16 without NVLink (32 GB/s each way): NCCL's ring moves 2(n-1)/n of
#: the payload per GPU at ~20 GB/s, so 20, 13.3 and 11.4 GB/s of payload at TP 2, 4, 8, after a
#: start-up of a few tens of us. docs/gpu-mix.md says what this prior gives against a published
#: L40S serving measurement.
ADA_PRIOR = FamilyCoefficients(
    gemm_flops_eff=0.717,
    weight_bw_eff=0.781,
    gemm_kernel_s=11.5e-6,
    act_bw_eff=0.494,
    elementwise_kernel_s=2.06e-6,
    allreduce_latency_s=MappingProxyType({2: 20e-6, 4: 30e-6, 8: 40e-6}),
    allreduce_bw_bytes_s=MappingProxyType({2: 20e9, 4: 13.3e9, 8: 11.4e9}),
    launch_per_layer_s=0.533e-3,
    serving_flops_scale=1.0,
    reference_power_w=350.0,
)


@dataclass(frozen=True, slots=True)
class Param:
    """One fitted scalar: dotted path, physical range, prior, unit scale and stage.

    The prior is a normal distribution (``start`` +- ``width``, natural units) that enters
    the cost as a weak regularising term (:data:`PRIOR_WEIGHT`); the optimiser starts at its
    centre. ``lo`` and ``hi`` are hard physical bounds.
    """

    path: str
    start: float
    lo: float
    hi: float
    #: The optimiser sees value / scale (keeps every variable near 1).
    scale: float
    #: The fit stage that owns it (see the module docstring).
    stage: str
    #: Standard deviation of the prior around ``start``, natural units.
    width: float
    #: Why the prior sits where it does (printed in docs/performance-model-fit.md).
    why: str = ""


def _params() -> tuple[Param, ...]:
    ps: list[Param] = []
    us, ms = 1e-6, 1e-3
    for f in _FAMILIES:
        st = f"kernels-{f}"
        ps += [
            Param(
                f"{f}.gemm_flops_eff", 0.7, 0.2, 1.0, 1.0, st, 0.2, "cuBLAS bf16 GEMMs reach 60-80% of peak"
            ),
            Param(f"{f}.weight_bw_eff", 0.8, 0.3, 1.0, 1.0, st, 0.15, "streaming reads reach 70-90% of HBM"),
            Param(
                f"{f}.gemm_kernel_s", 5 * us, 0.0, 50 * us, us, st, 10 * us, "launch + tail wave, a few us"
            ),
            Param(f"{f}.act_bw_eff", 0.5, 0.05, 1.0, 1.0, st, 0.3, "small element-wise kernels"),
            Param(f"{f}.elementwise_kernel_s", 5 * us, 0.0, 50 * us, us, st, 10 * us, "launch, a few us"),
        ]
        for tp in _TPS:
            ps += [
                Param(
                    f"{f}.allreduce_latency_s.{tp}",
                    20 * us,
                    1 * us,
                    1 * ms,
                    us,
                    f"allreduce-{f}",
                    30 * us,
                    "NCCL ring/tree start-up, tens of us",
                ),
                Param(
                    f"{f}.allreduce_bw_bytes_s.{tp}",
                    150e9,
                    5e9,
                    2e12,
                    1e9,
                    f"allreduce-{f}",
                    150e9,
                    "bus bandwidth below NVLink's per-direction peak",
                ),
            ]
    ps += [
        Param(
            "attn_prefill_flops_eff",
            0.3,
            0.02,
            1.0,
            1.0,
            "attention",
            0.2,
            "FlashAttention-2, 20-60% of peak",
        ),
        Param("attn_kv_bw_eff", 0.5, 0.05, 1.0, 1.0, "attention", 0.3, "paged KV reads"),
        Param("attn_kernel_s", 10 * us, 0.0, 200 * us, us, "attention", 20 * us, "launch + split-K reduce"),
        Param("cpu_iter_s", 1 * ms, 0.0, 20 * ms, ms, "cpu", 2 * ms, "Python scheduler, ~1 ms"),
        Param("cpu_per_seq_s", 0.05 * ms, 0.0, 1 * ms, ms, "cpu", 0.1 * ms, "per-sequence bookkeeping"),
        Param("cpu_tp_s", 0.3 * ms, 0.0, 10 * ms, ms, "cpu", 1 * ms, "broadcast to TP workers"),
    ]
    for f in _FAMILIES:
        ps += [
            Param(
                f"{f}.launch_per_layer_s",
                0.2 * ms,
                0.02 * ms,
                1 * ms,
                ms,
                "engines",
                0.1 * ms,
                "eager PyTorch issues ~20 kernels a layer at ~10 us each",
            ),
            # Upper bound: the data-sheet peak (gemm_flops_eff x this <= 1), set per fit in
            # _stage_bounds from the kernel stage's gemm_flops_eff.
            Param(
                f"{f}.serving_flops_scale",
                0.9,
                0.5,
                2.0,
                1.0,
                "engines",
                0.2,
                "a serving run sustains about the kernel profiles' FLOP rate",
            ),
        ]
    ps.append(
        Param(
            "tp_compute_penalty", 0.05, 0.0, 0.5, 0.1, "engines", 0.05, "ranks wait for the slowest, a few %"
        )
    )
    for st in _STACKS:
        ps += [
            Param(f"stack.{st}.iter_s", 2 * ms, 0.0, 50 * ms, ms, "engines", 10 * ms, "engine loop, ms"),
            Param(
                f"stack.{st}.per_seq_s", 0.1 * ms, 0.0, 5 * ms, ms, "engines", 0.5 * ms, "per sequence, <1 ms"
            ),
            Param(
                f"stack.{st}.prefill_iter_s",
                2 * ms,
                0.0,
                50 * ms,
                ms,
                "engines",
                10 * ms,
                "prefill set-up, ms",
            ),
        ]
    # Only the end-to-end vLLM rows span several vocabularies and TP degrees on one engine:
    # they alone identify the engine's all-reduce and sampling costs.
    ps += [
        Param(
            "stack.vllm.allreduce_latency_s",
            10 * us,
            1 * us,
            100 * us,
            us,
            "engines",
            10 * us,
            "custom all-reduce over NVLink, ~5-20 us",
        ),
        Param(
            "stack.vllm.sample_s_per_logit",
            0.2e-9,
            0.0,
            1e-8,
            1e-9,
            "engines",
            0.5e-9,
            "softmax + sort of the logits: ~0.1-1 ns per entry",
        ),
        Param(
            "stack.vllm.graph_kernel_scale",
            0.5,
            0.0,
            1.0,
            1.0,
            "engines",
            0.3,
            "a CUDA graph removes most per-kernel launch time",
        ),
        Param(
            "stack.vllm.tp_compute_penalty",
            0.05,
            0.0,
            0.5,
            0.1,
            "engines",
            0.05,
            "vLLM's ranks wait for the slowest at 2 all-reduces a layer, a few %",
        ),
        Param(
            "stack.vllm.gqa_kv_reread",
            0.2,
            0.0,
            1.0,
            1.0,
            "engines",
            0.3,
            "per-query-head re-reads mostly served by L2",
        ),
        # A vocabulary's sampling cost is paid per iteration, not per sequence: with the cost per
        # sequence alone, Qwen2-7B (152,064 entries) against Llama-2-7B (32,000) on one H100 came
        # out 0.36 ms a step too fast at batch 1 and 0.8 ms too slow at batch 64 (fitted rows).
        Param(
            "stack.vllm.sample_s_per_vocab",
            2e-9,
            0.0,
            1e-7,
            1e-9,
            "engines",
            5e-9,
            "row-wise sampler kernels, one block a row: ~10 passes of 4 B at 10-50 GB/s, 1-5 ns",
        ),
        # Llama-2-7B and Qwen2-7B on H100 at batch 1 run only 0.26 and 0.42 ms a step faster at
        # TP 4 than at TP 2, while halving their weight stream saves 1.1-1.2 ms: the all-reduce waits
        # on more peers.
        Param(
            "stack.vllm.allreduce_peer_s",
            3e-6,
            0.0,
            50e-6,
            1e-6,
            "engines",
            5e-6,
            "a one-shot all-reduce signals and reads every peer, a few us each",
        ),
    ]
    # The host CPU of a GH200 is the superchip's own Grace (Arm Neoverse V2); every other row ran
    # on an x86 host, whose time is the unit. Only Qwen2-7B's GH200 rows determine it (Llama-2-7B
    # on GH200 is held out): at batch 64 the engine served them 3-9% slower on a GH200 than on an
    # H100, while the GPU alone (19% more HBM bandwidth, 13% higher clock) is faster at every batch.
    ps.append(
        Param(
            "host_time_scale.grace",
            1.0,
            0.5,
            3.0,
            1.0,
            "engines",
            0.3,
            "single-threaded Python on a Neoverse V2 core against an x86 server core: within ~30%",
        )
    )
    return tuple(ps)


#: Every fitted scalar, in vector order.
PARAMS: tuple[Param, ...] = _params()
_INDEX = {p.path: i for i, p in enumerate(PARAMS)}

#: Fit stages in order: (name, sources it reads, GPU family its points must be on or None).
STAGES: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    *((f"kernels-{f}", ("vidur_gemm", "vidur_elementwise"), f) for f in _FAMILIES),
    *((f"allreduce-{f}", ("vidur_allreduce",), f) for f in _FAMILIES),
    ("attention", ("vidur_attention",), None),
    ("cpu", ("vidur_cpu",), None),
    (
        "engines",
        (
            "splitwise_prompt",
            "splitwise_token",
            "sarathi_decode",
            "sarathi_prefill",
            "sarathi_chunked",
            "sarathi_mixed",
            "argonne_e2e",
            "argonne_ttft",
        ),
        None,
    ),
)


def coefficients_from_vector(
    values: Sequence[float], meta: Mapping[str, Any] | None = None
) -> PerfCoefficients:
    """Assemble :class:`PerfCoefficients` from parameter values (in natural units, PARAMS order)."""
    v = {p.path: float(x) for p, x in zip(PARAMS, values, strict=True)}
    fams = {}
    for f in _FAMILIES:
        fams[f] = FamilyCoefficients(
            gemm_flops_eff=v[f"{f}.gemm_flops_eff"],
            weight_bw_eff=v[f"{f}.weight_bw_eff"],
            gemm_kernel_s=v[f"{f}.gemm_kernel_s"],
            act_bw_eff=v[f"{f}.act_bw_eff"],
            elementwise_kernel_s=v[f"{f}.elementwise_kernel_s"],
            allreduce_latency_s=MappingProxyType({tp: v[f"{f}.allreduce_latency_s.{tp}"] for tp in _TPS}),
            allreduce_bw_bytes_s=MappingProxyType({tp: v[f"{f}.allreduce_bw_bytes_s.{tp}"] for tp in _TPS}),
            launch_per_layer_s=v[f"{f}.launch_per_layer_s"],
            serving_flops_scale=v[f"{f}.serving_flops_scale"],
            reference_power_w=REFERENCE_POWER_W[f],
        )
    fams["ada"] = ADA_PRIOR
    stacks = {
        st: StackCoefficients(
            iter_s=v[f"stack.{st}.iter_s"],
            per_seq_s=v[f"stack.{st}.per_seq_s"],
            prefill_iter_s=v[f"stack.{st}.prefill_iter_s"],
            cuda_graph_max_batch=VLLM_CUDA_GRAPH_MAX_BATCH if st == "vllm" else 0,
            allreduce_latency_s=v.get(f"stack.{st}.allreduce_latency_s", 0.0),
            sample_s_per_logit=v.get(f"stack.{st}.sample_s_per_logit", 0.0),
            sample_s_per_vocab=v.get(f"stack.{st}.sample_s_per_vocab", 0.0),
            allreduce_peer_s=v.get(f"stack.{st}.allreduce_peer_s", 0.0),
            graph_kernel_scale=v.get(f"stack.{st}.graph_kernel_scale", 1.0),
            gqa_kv_reread=v.get(f"stack.{st}.gqa_kv_reread", 0.0),
            tp_compute_penalty=v.get(f"stack.{st}.tp_compute_penalty"),
        )
        for st in _STACKS
    }
    return PerfCoefficients(
        families=MappingProxyType(fams),
        gemm_blend_exp=GEMM_BLEND_EXP,
        attn_prefill_flops_eff=v["attn_prefill_flops_eff"],
        attn_kv_bw_eff=v["attn_kv_bw_eff"],
        attn_kernel_s=v["attn_kernel_s"],
        cpu_iter_s=v["cpu_iter_s"],
        cpu_per_seq_s=v["cpu_per_seq_s"],
        cpu_tp_s=v["cpu_tp_s"],
        stacks=MappingProxyType(stacks),
        tp_compute_penalty=v["tp_compute_penalty"],
        default_stack="vllm",
        host_time_scale=MappingProxyType(
            {k.split(".", 1)[1]: x for k, x in v.items() if k.startswith("host_time_scale.")}
        ),
        meta=MappingProxyType(dict(meta or {})),
    )


def _family_of(gpu: str) -> str:
    from llmscale.perf.catalogue import get_gpu

    return get_gpu(gpu).family


def predict(points: Sequence[CalPoint], coeffs: PerfCoefficients) -> list[float]:
    """Model prediction (s) of every point, in order."""
    import numpy as np

    out = [math.nan] * len(points)
    models: dict[tuple[str, str, int, str], PerfModel] = {}

    def pm(p: CalPoint) -> PerfModel:
        k = (p.model, p.gpu, p.tp, p.stack)
        if k not in models:
            models[k] = PerfModel(p.model, p.gpu, p.tp, coeffs, stack=p.stack)
        return models[k]

    # Vectorised per (kind, configuration, flags) group: the component methods are plain arithmetic.
    groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for i, p in enumerate(points):
        if p.kind == "attention":
            groups[(p.kind, p.model, p.gpu, p.tp, p.stack, p.args[2], p.args[3])].append(i)
        elif p.kind in ("gemm", "elementwise", "allreduce"):
            groups[(p.kind, p.model, p.gpu, p.tp, p.stack)].append(i)
        else:
            groups[(p.kind, i)].append(i)
    for key, idx in groups.items():
        kind = key[0]
        first = points[idx[0]]
        if kind == "gemm":
            n = np.array([points[i].args[0] for i in idx], dtype=float)
            vals = cast(Any, pm(first)).gemm_time_s(n, 0)
        elif kind == "elementwise":
            n = np.array([points[i].args[0] for i in idx], dtype=float)
            vals = cast(Any, pm(first)).elementwise_time_s(n)
        elif kind == "attention":
            pairs = np.array([points[i].args[0] for i in idx], dtype=float)
            ctx = np.array([points[i].args[1] for i in idx], dtype=float)
            vals = cast(Any, pm(first)).attention_layer_time_s(pairs, ctx, first.args[2], first.args[3])
        elif kind == "allreduce":
            fam = coeffs.family(_family_of(first.gpu))
            size = np.array([points[i].args[0] for i in idx], dtype=float)
            vals = fam.allreduce_latency_s[first.tp] + size / fam.allreduce_bw_bytes_s[first.tp]
        elif kind == "cpu":
            vals = [
                coeffs.cpu_iter_s
                + coeffs.cpu_per_seq_s * first.args[0]
                + (coeffs.cpu_tp_s if first.tp > 1 else 0.0)
            ]
        elif kind == "steps":
            model = pm(first)
            vals = [sum(model.step(*s).duration_s for s in first.args)]
        elif kind == "schedule":
            vals = [first.args[0].makespan_s(pm(first))]
        else:  # pragma: no cover - calibration builds only the kinds above
            raise ValueError(f"unknown calibration kind {kind!r}")
        for i, v in zip(idx, np.atleast_1d(np.asarray(vals, dtype=float)), strict=True):
            out[i] = float(v)
    return out


def _ape(pred: float, meas: float) -> float:
    return abs(pred / meas - 1.0) * 100.0


def error_report(points: Sequence[CalPoint], coeffs: PerfCoefficients) -> dict[str, Any]:
    """Median and worst absolute percentage error per source, held-out and fit points, and overall.

    The overall median is the median over all held-out points (each point counts once).
    """
    preds = predict(points, coeffs)
    rows: dict[str, dict[str, list[tuple[float, CalPoint, float]]]] = defaultdict(
        lambda: {"held_out": [], "fit": []}
    )
    for p, y in zip(points, preds, strict=True):
        rows[p.source]["held_out" if p.held_out else "fit"].append((_ape(y, p.measured_s), p, y))

    def summary(items: list[tuple[float, CalPoint, float]]) -> dict[str, Any]:
        if not items:
            return {"n": 0}
        worst = max(items, key=lambda t: t[0])
        return {
            "n": len(items),
            "median_ape_pct": round(statistics.median(t[0] for t in items), 2),
            "worst_ape_pct": round(worst[0], 2),
            "worst_point": f"{worst[1].config} {worst[1].key[1:]}: measured "
            f"{worst[1].measured_s * 1e3:.4g} ms, model {worst[2] * 1e3:.4g} ms",
        }

    report: dict[str, Any] = {"by_source": {}}
    all_held: list[tuple[float, CalPoint, float]] = []
    all_fit: list[tuple[float, CalPoint, float]] = []
    for source in SOURCES:
        if source not in rows:
            continue
        r = rows[source]
        report["by_source"][source] = {"held_out": summary(r["held_out"]), "fit": summary(r["fit"])}
        all_held += r["held_out"]
        all_fit += r["fit"]
    report["overall"] = {"held_out": summary(all_held), "fit": summary(all_fit)}
    # Median of per-source held-out medians: each source counts once.
    per_source = [v["held_out"]["median_ape_pct"] for v in report["by_source"].values() if v["held_out"]["n"]]
    report["overall"]["held_out_median_of_source_medians_pct"] = round(statistics.median(per_source), 2)
    return report


def _stage_points(points: Sequence[CalPoint], sources: tuple[str, ...], family: str | None) -> list[CalPoint]:
    return [
        p
        for p in points
        if not p.held_out and p.source in sources and (family is None or _family_of(p.gpu) == family)
    ]


def _stage_bounds(idx: Sequence[int], values: Sequence[float]) -> tuple[list[float], list[float]]:
    """Hard bounds of a stage's parameters (natural units), the data-sheet peak included.

    ``serving_flops_scale`` multiplies the kernel stage's ``gemm_flops_eff``: their product is
    the share of the data-sheet FLOP rate a serving step reaches, at most 1 (llmscale.perf.bounds).
    """
    lo, hi = [], []
    for i in idx:
        p = PARAMS[i]
        top = p.hi
        if p.path.endswith(".serving_flops_scale"):
            fam = p.path.split(".", 1)[0]
            top = min(top, 1.0 / values[_INDEX[f"{fam}.gemm_flops_eff"]])
        lo.append(p.lo)
        hi.append(top)
    return lo, hi


def _fit_stage(
    name: str,
    pts: Sequence[CalPoint],
    values: list[float],
    starts: Sequence[float],
    max_nfev: int,
) -> tuple[list[float], dict[str, Any]]:
    """Fit the parameters of stage ``name`` on ``pts``, the others fixed at ``values``.

    Cost = 1/2 sum of squared data residuals + 1/2 sum of squared prior residuals
    ``PRIOR_WEIGHT x (value - prior centre) / prior width``. Starts at the prior centres
    (``starts`` scale them; the first is the deterministic start); keeps the lowest cost and
    reports how far the other starts ended from it, in units of each parameter's uncertainty.
    """
    import numpy as np
    from scipy.optimize import least_squares

    idx = [i for i, p in enumerate(PARAMS) if p.stage == name]
    counts: dict[str, int] = defaultdict(int)
    for p in pts:
        counts[p.source] += 1
    weights = np.array([1.0 / math.sqrt(counts[p.source]) for p in pts])
    measured = np.array([p.measured_s for p in pts])
    scales = np.array([PARAMS[i].scale for i in idx])
    x0 = np.array([PARAMS[i].start for i in idx]) / scales
    prior_w = np.array([PARAMS[i].width for i in idx]) / scales
    lo_n, hi_n = _stage_bounds(idx, values)
    lo = np.array(lo_n) / scales
    hi = np.array(hi_n) / scales
    m = len(pts)

    def residuals(x: Any) -> Any:
        full = list(values)
        for j, i in enumerate(idx):
            full[i] = float(x[j] * scales[j])
        pred = np.array(predict(pts, coefficients_from_vector(full)))
        r = np.log(np.maximum(pred, 1e-12) / measured) / _ROBUST_SCALE
        # soft-L1 on the unweighted log ratio, then the source weight: r~^2 = w^2 rho(r).
        robust = np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))
        prior = PRIOR_WEIGHT * (x - x0) / prior_w
        return np.concatenate([weights * _ROBUST_SCALE * robust, prior])

    results = []
    for factor in starts:
        res = least_squares(
            residuals,
            np.clip(x0 * factor, lo, hi),
            bounds=(lo, hi),
            loss="linear",
            x_scale=1.0,
            max_nfev=max_nfev,
            method="trf",
            ftol=1e-12,
            xtol=1e-12,
            gtol=1e-12,
        )
        results.append(res)
    best = min(range(len(results)), key=lambda k: (float(results[k].cost), k))
    res = results[best]
    out = list(values)
    for j, i in enumerate(idx):
        out[i] = float(res.x[j] * scales[j])

    # Uncertainty: Gauss-Newton covariance of the regularised weighted least squares,
    # s^2 (J^T J)^-1 with J over data and prior rows and s^2 = data cost / (m - n) x 2.
    jac = np.asarray(res.jac)
    data_jac, prior_jac = jac[:m], jac[m:]
    data_cost = 0.5 * float(np.sum(np.asarray(res.fun[:m]) ** 2))
    s2 = 2.0 * data_cost / max(1, m - len(idx))
    info_mat = jac.T @ jac
    cov = s2 * np.linalg.pinv(info_mat)
    sigma = np.sqrt(np.maximum(np.diag(cov), 0.0)) * scales
    # Which rows determine each parameter: each source's share of the diagonal information.
    diag_total = np.maximum(np.diag(info_mat), 1e-300)
    by_source: dict[str, Any] = {}
    src_of = np.array([p.source for p in pts])
    for src in sorted(counts):
        rows = data_jac[src_of == src]
        by_source[src] = np.sum(rows * rows, axis=0) / diag_total
    prior_share = np.sum(prior_jac * prior_jac, axis=0) / diag_total
    params: dict[str, Any] = {}
    for j, i in enumerate(idx):
        shares = {src: round(float(v[j]), 3) for src, v in by_source.items() if v[j] >= 0.05}
        params[PARAMS[i].path] = {
            "sigma": _round_sig(float(sigma[j])),
            "determined_by": dict(sorted(shares.items(), key=lambda kv: -kv[1])),
            "prior_share": round(float(prior_share[j]), 3),
            "at_bound": bool(min(out[i] - lo_n[j], hi_n[j] - out[i]) <= 1e-6 * PARAMS[i].scale),
        }
    safe_sigma = np.maximum(sigma / scales, 1e-300)
    spread = {
        f"x{f}": round(float(np.max(np.abs(r.x - res.x) / safe_sigma)), 6)
        for f, r in zip(starts, results, strict=True)
    }
    info = {
        "points": m,
        "points_by_source": dict(sorted(counts.items())),
        "cost": round(float(res.cost), 8),
        "data_cost": round(data_cost, 8),
        "nfev": int(res.nfev),
        "status": int(res.status),
        "starts": {f"x{f}": round(float(r.cost), 8) for f, r in zip(starts, results, strict=True)},
        "starts_max_distance_sigma": spread,
        "params": params,
    }
    return out, info


def fit_coefficients(
    points: Sequence[CalPoint],
    *,
    max_nfev: int = 1000,
    starts: Sequence[float] = _STARTS,
    progress: Callable[[str], None] | None = None,
) -> tuple[PerfCoefficients, dict[str, Any]]:
    """Fit PARAMS stage by stage on the non-held-out points; return the coefficients and optimiser info.

    Every stage starts at its priors' centres. ``starts`` scale that point for the engine
    stage (the only one with kinks): the lowest cost wins, and ``starts_max_distance_sigma``
    says how far (in parameter uncertainties) the others ended from it. The smooth stages,
    each identified by thousands of kernel timings, start once.
    """
    import numpy
    import scipy

    values = [p.start for p in PARAMS]
    stages: dict[str, Any] = {}
    for name, sources, family in STAGES:
        pts = _stage_points(points, sources, family)
        st = starts if name == "engines" else (1.0,)
        values, info = _fit_stage(name, pts, values, st, max_nfev)
        stages[name] = info
        if progress is not None:
            progress(
                f"  {name}: {info['points']} points, cost {info['cost']:.6g} after {info['nfev']} evaluations"
            )
    info_all = {
        "optimizer": "scipy.optimize.least_squares(method='trf', ftol=xtol=gtol=1e-12) per stage from "
        "the priors' centres; residual = source weight x soft-L1(log(pred/measured), scale "
        f"{_ROBUST_SCALE}); prior residual = {PRIOR_WEIGHT} x (value - centre) / width; sigma = "
        "Gauss-Newton standard error s^2 (J^T J)^-1, s^2 = 2 x data cost / (points - parameters)",
        "stages": stages,
        "fit_points": sum(s["points"] for s in stages.values()),
        "versions": {"numpy": numpy.__version__, "scipy": scipy.__version__},
    }
    return coefficients_from_vector(values), info_all


def _round_sig(v: float) -> float:
    """6 significant digits; times below a picosecond are zero (parameters sitting on a 0 bound)."""
    if abs(v) < 1e-12:
        return 0.0
    return float(f"{v:.6g}")


#: Measured Sarathi-Serve decode step (Fig. 2, Yi-34B TP2 A100-PCIe, ~1,022-token context), ms by batch.
SARATHI_DECODE_MS = {1: 46.80, 2: 47.50, 4: 48.85, 8: 69.68, 16: 77.25, 32: 87.90, 64: 127.81, 128: 189.33}
#: Measured (shared/data/calibration/argonne): vLLM serves a batch of one 128-token prompt with 128
#: output tokens of Llama-2-7B on one H100 in 0.93 s, ~7.3 ms per output token.
LLAMA2_7B_H100_BATCH1_TPOT_MS = 7.3


def anchors(coeffs: PerfCoefficients) -> dict[str, Any]:
    """Model values at sanity anchors (not used by the fit)."""
    pm = PerfModel("llama-2-7b", "h100-80gb", 1, coeffs)
    pm3 = PerfModel("llama-3-8b", "h100-80gb", 1, coeffs)
    sar = PerfModel("yi-34b", "a100-80gb-pcie", 2, coeffs, stack="sarathi")
    return {
        "llama2_7b_h100_tp1_batch1_tpot_ms": {
            "measured_ms": LLAMA2_7B_H100_BATCH1_TPOT_MS,
            "model_ms_ctx_192": round(pm.decode(1, 192).duration_s * 1e3, 2),
        },
        "llama3_8b_h100_tp1_decode_ms_ctx_1000": {
            f"batch_{b}": round(pm3.decode(b, 1000).duration_s * 1e3, 2) for b in (1, 8, 64, 256)
        },
        "sarathi_yi34b_tp2_a100_decode_ms": {
            "batch": list(SARATHI_DECODE_MS),
            "measured_ms": list(SARATHI_DECODE_MS.values()),
            "model_sarathi_stack_ms": [
                round(sar.decode(b, 1022).duration_s * 1e3, 1) for b in SARATHI_DECODE_MS
            ],
        },
    }


def build_document(
    points: Sequence[CalPoint],
    sources: Mapping[str, Any],
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fit, round and evaluate: the full ``coefficients.json`` document (deterministic)."""
    from llmscale.perf.coefficients import coefficients_from_dict, coefficients_to_dict

    fitted, info = fit_coefficients(points, progress=progress)
    doc = coefficients_to_dict(fitted)
    # Round in the JSON structure, then evaluate exactly what is committed.
    doc = _round_tree(doc)
    coeffs = coefficients_from_dict(doc)
    report = error_report(points, coeffs)
    doc = {
        "format": "llmscale.perf coefficients v1",
        "fitted_on": (
            "public calibration measurements in shared/data/calibration: Vidur per-op GEMM and "
            "element-wise profiles (A100, H100), Vidur FlashAttention profile (A100), Vidur NCCL "
            "all-reduce (DGX-A100, DGX-H100), Vidur CPU overheads (A100), Splitwise prompt/token "
            "times (Llama-2-70B, BLOOM-176B on DGX-A100/H100), Sarathi-Serve artifacts (Yi-34B TP2 "
            "A100-PCIe), Argonne LLM-Inference-Bench end-to-end closed-batch latencies and TTFT of "
            "vLLM (Llama-2-7B/70B, Mistral-7B, Mixtral-8x7B, Qwen2-7B/72B on A100-40GB, H100, GH200). "
            "Produced by scripts/fit_perf.py."
        ),
        "split": (
            "held out: every 5th point of each source (sorted by key) and, whole, the Splitwise "
            "BLOOM-176B rows, Vidur's CodeLlama-34B GEMM/element-wise profiles, and the end-to-end "
            "rows of Mistral-7B (every GPU and TP), Qwen2-72B (H100 TP4) and Llama-2-7B on GH200"
        ),
        "sources": dict(sources),
        "fit": info,
        "errors": report,
        "anchors": anchors(coeffs),
        "model": doc["model"],
    }
    return doc


def _round_tree(x: Any) -> Any:
    if isinstance(x, float):
        return _round_sig(x)
    if isinstance(x, dict):
        return {k: _round_tree(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round_tree(v) for v in x]
    return x
