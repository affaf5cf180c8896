"""The ``--json`` documents of ``analyze``, ``diagnose``, ``calibrate`` and ``tune``, from their results.

Plain dicts shaped as the models of :mod:`llmscale.schemas` describe (the CLI adds
``schema_version`` when it writes them: :func:`llmscale.cli.common.write_json`). Numbers that
are NaN or infinite in a result (a knee without a value) become null: JSON has no NaN, and
``json.dumps`` would write a bare ``NaN`` no strict reader takes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["analyze_document", "calibrate_document", "diagnose_document", "tune_document"]


def _num(x: Any) -> float | None:
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _num0(x: Any) -> float:
    """A required number: NaN or infinite as 0.0 is never right, so it is refused loudly."""
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(f"{x!r} is not a finite number")
    return v


def analyze_document(
    result: Any, summaries: dict[str, str], report: Path | None, policy_config: Path | None
) -> dict[str, Any]:
    """``analyze --json``: the knees, the phase clusters, the scale effects and the predictors."""
    table = result.table

    def knee(k: Any) -> dict[str, Any] | None:
        if k is None or not (math.isfinite(k.load) and math.isfinite(k.value)):
            return None
        return {"load": float(k.load), "value": float(k.value)}

    phase = None
    if result.phase is not None:
        p = result.phase
        phase = {
            "eps": float(p.eps),
            "min_weight_s": float(p.min_weight_s),
            "clusters": [
                {
                    "label": int(c.label),
                    "entropy": float(c.entropy),
                    "bandwidth": float(c.bandwidth),
                    "share_of_time": float(c.share_of_time),
                    "num_ticks": int(c.num_ticks),
                    "zone": c.zone,
                }
                for c in p.clusters
            ],
        }
    return {
        "policy": str(table.policy),
        "source": str(table.source),
        "ticks": len(table),
        "latency_knee": knee(result.latency_knee),
        "throughput_knee": knee(result.throughput_knee),
        "phase": phase,
        "effects": [
            {
                "action": e.action,
                "ate_s": float(e.ate_s),
                "ci_low_s": float(e.ci_low_s),
                "ci_high_s": float(e.ci_high_s),
                "naive_diff_s": float(e.naive_diff_s),
                "num_treated": int(e.num_treated),
                "num_control": int(e.num_control),
                "horizon_s": float(e.horizon_s),
                "covariates": list(e.covariates),
                "helped": e.helped,
            }
            for e in result.effects
        ],
        "predictors": [
            {
                "name": s.name,
                "errors": None
                if s.errors is None
                else {k: v for k, v in ((k, _num(v)) for k, v in s.errors.items()) if v is not None},
                "missing": s.missing,
            }
            for s in result.predictors
        ],
        "notes": dict(result.notes),
        "summaries": summaries,
        "report": None if report is None else str(report),
        "policy_config": None if policy_config is None else str(policy_config),
    }


def diagnose_document(table: Any, findings: Sequence[Any], unchecked: Sequence[str]) -> dict[str, Any]:
    """``diagnose --json``: one object per finding, as the terminal's rows."""
    return {
        "policy": str(table.policy),
        "source": str(table.source),
        "ticks": len(table),
        "findings": [
            {
                "kind": f.kind,
                "start_s": _num0(f.start_s),
                "end_s": _num0(f.end_s),
                "num_ticks": int(f.num_ticks),
                "peak": _num0(f.peak),
                "detail": f.detail,
            }
            for f in findings
        ],
        "unchecked": list(unchecked),
    }


def calibrate_document(profile: Any, out: Path, inputs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``calibrate --json``: every point with its error, the factors, and which inputs were read how."""
    return {
        "profile": str(out),
        "inputs": list(inputs),
        "points": [
            {
                "label": p.label,
                "measured_s": float(p.measured_s),
                "uncalibrated_s": float(p.uncalibrated_s),
                "predicted_s": float(p.predicted_s),
                "error_pct": float(p.error_pct),
                "fitted": bool(p.fitted),
            }
            for p in profile.points
        ],
        "factors": {k: float(v) for k, v in profile.factors.items()},
        "uncertainty": {k: dict(v) for k, v in profile.uncertainty.items()},
        "notes": list(profile.notes),
    }


def tune_document(result: Any, out: Path, report: Path, found: bool) -> dict[str, Any]:
    """``tune --json``: every trial of the study, the best and the defaults' trial."""
    best, base = result.best, result.baseline
    return {
        "policy": result.spec.policy,
        "study": result.spec.study_name,
        "target_attainment": float(result.spec.target_attainment),
        "cases": list(result.cases),
        "trials": [t.as_json() for t in result.trials],
        "ran_now": int(result.ran_now),
        "best": None if best is None else best.as_json(),
        "baseline": None if base is None else base.as_json(),
        "policy_config": str(out) if found else None,
        "report": str(report),
    }
