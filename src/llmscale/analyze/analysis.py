"""Every analysis of ``llmscale analyze`` over one :class:`TickTable`, with what each lacked."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llmscale.analyze.causal import ScaleEffect, outcome_after, scale_action_effect
from llmscale.analyze.knee import Knee, find_knee
from llmscale.analyze.log import QUANTITIES, TickTable
from llmscale.analyze.phase import PhaseClusters, cluster_phase_diagram
from llmscale.analyze.predictors import PredictorScore, score_predictors

__all__ = ["Analysis", "AnalysisSettings", "analyze_table", "per_replica"]


@dataclass(frozen=True)
class AnalysisSettings:
    #: how far ahead the outcome of a scale action is read (s): about a cold start and a window
    effect_horizon_s: float = 180.0
    #: how far ahead the predictors predict (s): the catalogue's 60 s window
    predict_horizon_s: float = 60.0
    knee_bins: int = 20
    dbscan_eps: float = 0.08
    dbscan_min_weight_s: float = 120.0


@dataclass(frozen=True)
class Analysis:
    table: TickTable
    settings: AnalysisSettings
    latency_knee: Knee | None
    throughput_knee: Knee | None
    phase: PhaseClusters | None
    effects: tuple[ScaleEffect, ...]
    predictors: tuple[PredictorScore, ...]
    #: section -> why it is empty or partial
    notes: dict[str, str] = field(default_factory=dict)


def _needs(q: str) -> str:
    return f"{q} ({' or '.join(QUANTITIES[q])})"


def per_replica(values: np.ndarray, serving: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(serving > 0, values / serving, np.nan)


def analyze_table(table: TickTable, settings: AnalysisSettings | None = None) -> Analysis:
    s = settings or AnalysisSettings()
    notes: dict[str, str] = {}
    serving = table.serving()
    load, p99, thr = table.quantity("load_rps"), table.quantity("p99_s"), table.quantity("throughput")
    latency_knee = throughput_knee = None
    load_pr = per_replica(load, serving) if load is not None else None
    if load_pr is None or p99 is None:
        notes["knee"] = f"the log lacks {_needs('load_rps') if load is None else _needs('p99_s')}"
    else:
        latency_knee = find_knee(load_pr, p99, num_bins=s.knee_bins)
        if latency_knee is None:
            notes["knee"] = (
                "P99 does not bend up over the logged loads (fewer than 5 load bins, or no upturn)"
            )
    if load_pr is not None and thr is not None:
        if table.resolved.get("throughput") == table.resolved.get("load_rps"):
            notes["throughput"] = (
                f"throughput and load are both read from {table.resolved['load_rps']}: log generation_tps "
                "or arrival_rps to see where throughput stops following load"
            )
        else:
            throughput_knee = find_knee(
                load_pr, per_replica(thr, serving), concave=True, num_bins=s.knee_bins
            )
    elif load_pr is not None:
        notes["throughput"] = f"the log lacks {_needs('throughput')}"

    phase = None
    h, u = table.quantity("queue_entropy"), table.quantity("bw_p95")
    if h is None or u is None:
        missing = [_needs(q) for q, c in (("queue_entropy", h), ("bw_p95", u)) if c is None]
        notes["phase"] = f"the log lacks {' and '.join(missing)} (bandwidth-entropy logs both)"
    else:
        phase = cluster_phase_diagram(
            h, u, table.tick_s(), eps=s.dbscan_eps, min_weight_s=s.dbscan_min_weight_s
        )

    effects: list[ScaleEffect] = []
    if p99 is None:
        notes["effect"] = f"the log lacks {_needs('p99_s')}"
    else:
        outcome = outcome_after(table.time_s, p99, s.effect_horizon_s)
        cov = {"p99_now_s": p99, "serving_replicas": serving}
        if load is not None:
            cov["load_rps"] = load
        same = table.final == table.spec
        for action, treated in (
            ("scale up", table.final > table.spec),
            ("scale down", table.final < table.spec),
        ):
            eff = scale_action_effect(
                treated, same, outcome, cov, action=action, horizon_s=s.effect_horizon_s
            )
            if eff is not None:
                effects.append(eff)
            else:
                notes[f"effect {action}"] = (
                    f"{int(treated.sum())} {action} tick(s) and {int(same.sum())} unchanged: "
                    "fewer than 5 in an arm with a P99 "
                    f"{s.effect_horizon_s:.0f} s later"
                )
    predictors = tuple(score_predictors(table, horizon_s=s.predict_horizon_s))
    if not predictors:
        notes["predictors"] = f"the log lacks {_needs('p99_s')}"
    return Analysis(table, s, latency_knee, throughput_knee, phase, tuple(effects), predictors, notes)
