"""End-to-end fidelity of the step-time model on the Argonne closed batches (offline evaluation).

Used by ``benchmarks/perf_fidelity.py`` and ``tests/perf/test_perf_fidelity.py``: per (model,
GPU, TP) configuration, the error of the predicted batch latency (makespan), of the time per
output token at batch 1 (latency / output tokens: what a lightly loaded replica's users see),
and of the time to first token, plus two shape checks that a fudge factor per configuration
could not pass: does more tensor parallelism make a configuration faster where the engine got
faster, and does a batch of 64 cost the right multiple of a batch of 1.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from llmscale.offline.calibration import CalPoint
from llmscale.perf.coefficients import PerfCoefficients

__all__ = ["e2e_report"]


def _pct(pred: float, meas: float) -> float:
    return (pred / meas - 1.0) * 100.0


def _p90(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.9 * (len(s) - 1) + 0.5))]


def _summary(errs: Sequence[float]) -> dict[str, Any]:
    a = [abs(e) for e in errs]
    if not a:
        return {"n": 0}
    return {
        "n": len(a),
        "median_abs_pct": round(statistics.median(a), 2),
        "p90_abs_pct": round(_p90(a), 2),
        "worst_abs_pct": round(max(a), 2),
        "median_signed_pct": round(statistics.median(errs), 2),
    }


def e2e_report(points: Sequence[CalPoint], coeffs: PerfCoefficients) -> dict[str, Any]:
    """Errors of the Argonne end-to-end points, held-out configurations apart from fitted ones."""
    from llmscale.offline.perf_fit import predict

    pts = [p for p in points if p.source in ("argonne_e2e", "argonne_ttft")]
    preds = predict(pts, coeffs)
    by_cfg: dict[str, list[tuple[CalPoint, float]]] = defaultdict(list)
    for p, y in zip(pts, preds, strict=True):
        by_cfg[p.config].append((p, y))

    configs: dict[str, Any] = {}
    held_cfgs: set[str] = set()
    for cfg, rows in sorted(by_cfg.items()):
        e2e = [(p, y) for p, y in rows if p.source == "argonne_e2e"]
        ttft = [(p, y) for p, y in rows if p.source == "argonne_ttft"]
        # A configuration counts as held out when all its end-to-end rows are (a whole model/GPU/TP).
        whole = bool(e2e) and all(p.held_out for p, _ in e2e)
        if whole or (not e2e and all(p.held_out for p, _ in ttft)):
            held_cfgs.add(cfg)
        configs[cfg] = {
            "held_out": cfg in held_cfgs,
            "makespan": _summary([_pct(y, p.measured_s) for p, y in e2e]),
            "per_token_batch1": _summary([_pct(y, p.measured_s) for p, y in e2e if p.key[2] == 1]),
            "ttft": _summary([_pct(y, p.measured_s) for p, y in ttft]),
        }

    def pool(held: bool, source: str, batch1: bool = False) -> list[float]:
        return [
            _pct(y, p.measured_s)
            for cfg, rows in by_cfg.items()
            if (cfg in held_cfgs) == held
            for p, y in rows
            if p.source == source and (not batch1 or p.key[2] == 1)
        ]

    overall = {
        name: {
            "makespan": _summary(pool(held, "argonne_e2e")),
            "per_token_batch1": _summary(pool(held, "argonne_e2e", batch1=True)),
            "ttft": _summary(pool(held, "argonne_ttft")),
        }
        for name, held in (("held_out", True), ("fitted", False))
    }

    # Tensor parallelism: where the engine got faster going from TP1 to TP2/TP4, so must the model.
    lat: dict[tuple[str, str, int, int, int], tuple[float, float]] = {}
    for p, y in zip(pts, preds, strict=True):
        if p.source == "argonne_e2e":
            lat[(p.model, p.gpu, p.tp, p.key[1], p.key[2])] = (p.measured_s, y)
    tp_checks = []
    for (m, g, tp, length, batch), (meas, pred) in sorted(lat.items()):
        if tp == 1:
            continue
        base = lat.get((m, g, 1, length, batch))
        if base is None:
            continue
        held = f"{m}/{g}/tp{tp}/vllm" in held_cfgs or f"{m}/{g}/tp1/vllm" in held_cfgs
        if base[0] > meas:  # measured faster with more GPUs
            tp_checks.append(
                {
                    "config": f"{m}/{g}",
                    "tp": tp,
                    "length": length,
                    "batch": batch,
                    "held_out": held,
                    "ok": base[1] > pred,
                }
            )
    # Batch growth: latency(64) / latency(1) at each length, model vs measurement.
    ratios = []
    for (m, g, tp, length, batch), (meas, pred) in sorted(lat.items()):
        if batch != 64:
            continue
        one = lat.get((m, g, tp, length, 1))
        if one is None:
            continue
        cfg = f"{m}/{g}/tp{tp}/vllm"
        r_meas, r_pred = meas / one[0], pred / one[1]
        ratios.append(
            {
                "config": cfg,
                "length": length,
                "held_out": cfg in held_cfgs,
                "measured": round(r_meas, 3),
                "model": round(r_pred, 3),
                "error_pct": round(_pct(r_pred, r_meas), 2),
            }
        )
    return {"configs": configs, "overall": overall, "tp_speedup_checks": tp_checks, "batch64_ratios": ratios}
