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
   prefill-iteration overheads. Fitted jointly on Splitwise's and Sarathi-Serve's step
   times and the Argonne end-to-end latencies of vLLM, which pin the default "vllm" stack
   (CUDA graphs on decode) by makespan, not by operator sums.

Stages 1-4 are smooth problems in a handful of parameters each, identified by thousands of
kernel timings: they have one optimum and land on it from any start. Stage 5 has kinks
(a launch-bound iteration takes the larger of GPU and host time), so it starts from three
fixed points and keeps the lowest cost. The roofline blend exponent is a fixed constant, not
fitted (a free exponent ran to its upper bound: the GEMM profiles want a near-hard max()).
Residual = source weight x soft-L1 of the log ratio ``log(predicted / measured)`` (quadratic
up to ~10 %, linear beyond), each source weighted 1/sqrt(its points) within its stage.
Sorted data, fixed starts and bounds: deterministic on one machine. Not across machines: the
engine stage has several basins of near-equal cost, and a library's last digits (or the compiled
kernel against its Python source) decide which one a start reaches, so a refit elsewhere can
land on other coefficients of the same quality (tests/perf/test_perf_fidelity.py marks the
comparison as a known failure until the stage is made well-posed).

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
    "GEMM_BLEND_EXP",
    "LLAMA2_7B_H100_BATCH1_TPOT_MS",
    "PARAMS",
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
#: Start points of the engine stage: the nominal start scaled by these factors.
_STARTS = (1.0, 0.8, 1.25)
#: Roofline blend exponent p of (t_compute^p + t_memory^p)^(1/p): fixed, see the module docstring.
GEMM_BLEND_EXP = 20.0
#: vLLM captures CUDA graphs for decode batches of up to 256 sequences (its default
#: max capture size in 2024 releases and in V1 for these batch limits).
VLLM_CUDA_GRAPH_MAX_BATCH = 256


@dataclass(frozen=True, slots=True)
class Param:
    """One fitted scalar: dotted path in the coefficient structure, start, bounds, unit scale."""

    path: str
    start: float
    lo: float
    hi: float
    #: The optimiser sees value / scale (keeps every variable near 1).
    scale: float
    #: The fit stage that owns it (see the module docstring).
    stage: str


def _params() -> tuple[Param, ...]:
    ps: list[Param] = []
    us, ms = 1e-6, 1e-3
    for f in _FAMILIES:
        st = f"kernels-{f}"
        ps += [
            Param(f"{f}.gemm_flops_eff", 0.7, 0.2, 0.95, 1.0, st),
            Param(f"{f}.weight_bw_eff", 0.8, 0.3, 0.95, 1.0, st),
            Param(f"{f}.gemm_kernel_s", 5 * us, 0.0, 50 * us, us, st),
            Param(f"{f}.act_bw_eff", 0.5, 0.05, 0.95, 1.0, st),
            Param(f"{f}.elementwise_kernel_s", 5 * us, 0.0, 50 * us, us, st),
        ]
        for tp in _TPS:
            ps += [
                Param(f"{f}.allreduce_latency_s.{tp}", 20 * us, 1 * us, 1 * ms, us, f"allreduce-{f}"),
                Param(f"{f}.allreduce_bw_bytes_s.{tp}", 150e9, 5e9, 2e12, 1e9, f"allreduce-{f}"),
            ]
    ps += [
        Param("attn_prefill_flops_eff", 0.3, 0.02, 0.95, 1.0, "attention"),
        Param("attn_kv_bw_eff", 0.5, 0.05, 0.95, 1.0, "attention"),
        Param("attn_kernel_s", 10 * us, 0.0, 200 * us, us, "attention"),
        Param("cpu_iter_s", 1 * ms, 0.0, 20 * ms, ms, "cpu"),
        Param("cpu_per_seq_s", 0.05 * ms, 0.0, 1 * ms, ms, "cpu"),
        Param("cpu_tp_s", 0.3 * ms, 0.0, 10 * ms, ms, "cpu"),
    ]
    for f in _FAMILIES:
        ps += [
            Param(f"{f}.launch_per_layer_s", 0.2 * ms, 0.0, 2 * ms, ms, "engines"),
            Param(f"{f}.serving_flops_scale", 0.9, 0.3, 1.0, 1.0, "engines"),
        ]
    ps.append(Param("tp_compute_penalty", 0.05, 0.0, 1.0, 0.1, "engines"))
    for st in _STACKS:
        ps += [
            Param(f"stack.{st}.iter_s", 2 * ms, 0.0, 100 * ms, ms, "engines"),
            Param(f"stack.{st}.per_seq_s", 0.1 * ms, 0.0, 5 * ms, ms, "engines"),
            Param(f"stack.{st}.prefill_iter_s", 5 * ms, 0.0, 100 * ms, ms, "engines"),
        ]
    # Only the end-to-end vLLM rows span several vocabularies and TP degrees on one engine:
    # they alone identify the engine's all-reduce and sampling costs.
    ps += [
        Param("stack.vllm.allreduce_latency_s", 10 * us, 1 * us, 100 * us, us, "engines"),
        Param("stack.vllm.sample_s_per_logit", 1e-9, 0.0, 1e-7, 1e-9, "engines"),
        Param("stack.vllm.graph_kernel_scale", 0.5, 0.0, 1.0, 1.0, "engines"),
        Param("stack.vllm.gqa_kv_reread", 0.2, 0.0, 1.0, 1.0, "engines"),
    ]
    return tuple(ps)


#: Every fitted scalar, in vector order.
PARAMS: tuple[Param, ...] = _params()

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
        )
    stacks = {
        st: StackCoefficients(
            iter_s=v[f"stack.{st}.iter_s"],
            per_seq_s=v[f"stack.{st}.per_seq_s"],
            prefill_iter_s=v[f"stack.{st}.prefill_iter_s"],
            cuda_graph_max_batch=VLLM_CUDA_GRAPH_MAX_BATCH if st == "vllm" else 0,
            allreduce_latency_s=v.get(f"stack.{st}.allreduce_latency_s", 0.0),
            sample_s_per_logit=v.get(f"stack.{st}.sample_s_per_logit", 0.0),
            graph_kernel_scale=v.get(f"stack.{st}.graph_kernel_scale", 1.0),
            gqa_kv_reread=v.get(f"stack.{st}.gqa_kv_reread", 0.0),
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
        elif p.kind in ("gemm", "elementwise"):
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
            vals = [fam.allreduce_latency_s[first.tp] + first.args[0] / fam.allreduce_bw_bytes_s[first.tp]]
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


def _fit_stage(
    name: str,
    pts: Sequence[CalPoint],
    values: list[float],
    starts: Sequence[float],
    max_nfev: int,
) -> tuple[list[float], dict[str, Any]]:
    """Fit the parameters of stage ``name`` on ``pts``, the others fixed at ``values``."""
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
    lo = np.array([PARAMS[i].lo for i in idx]) / scales
    hi = np.array([PARAMS[i].hi for i in idx]) / scales

    def residuals(x: Any) -> Any:
        full = list(values)
        for j, i in enumerate(idx):
            full[i] = float(x[j] * scales[j])
        pred = np.array(predict(pts, coefficients_from_vector(full)))
        r = np.log(np.maximum(pred, 1e-12) / measured) / _ROBUST_SCALE
        # soft-L1 on the unweighted log ratio, then the source weight: r~^2 = w^2 rho(r).
        robust = np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))
        return weights * _ROBUST_SCALE * robust

    results = []
    for factor in starts:
        res = least_squares(
            residuals,
            np.clip(x0 * factor, lo, hi),
            bounds=(lo, hi),
            loss="linear",
            x_scale="jac",
            max_nfev=max_nfev,
            method="trf",
            ftol=1e-12,
            xtol=1e-12,
            gtol=1e-12,
        )
        results.append(res)
    res = min(results, key=lambda r: float(r.cost))
    out = list(values)
    for j, i in enumerate(idx):
        out[i] = float(res.x[j] * scales[j])
    at_bounds = [
        PARAMS[i].path
        for i in idx
        if min(out[i] - PARAMS[i].lo, PARAMS[i].hi - out[i]) <= 1e-6 * PARAMS[i].scale
    ]
    info = {
        "points": len(pts),
        "points_by_source": dict(sorted(counts.items())),
        "cost": round(float(res.cost), 8),
        "nfev": int(res.nfev),
        "status": int(res.status),
        "starts": {f"x{f}": round(float(r.cost), 8) for f, r in zip(starts, results, strict=True)},
        "params_at_bounds": at_bounds,
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

    ``starts`` scale the nominal start point of the engine stage (the only one with kinks);
    the lowest-cost result wins. The smooth stages start once, from the nominal point.
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
        "optimizer": "scipy.optimize.least_squares(method='trf') per stage; residual = source weight x "
        f"soft-L1(log(pred/measured), scale {_ROBUST_SCALE})",
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
