"""Fit the OOM-risk logistic of :mod:`llmscale.signals.risk` on simulated runs.

Regenerate the coefficients (about 4 minutes on 2 cores)::

    .venv/bin/python -m llmscale.offline.oom_fit

What it does:

1. runs the simulator (Llama-3-8B on one H100, ``llmscale.perf``) on
   :data:`SCENARIOS`: under- and overloaded fleets of fixed size on the
   ``default`` (ramp + x3 spike), ``flash-crowd``, ``diurnal`` and
   ``bandwidth-bound`` presets, with a smaller KV pool
   (``gpu_memory_utilization`` 0.5) or more sequences (``max_num_seqs`` 512)
   where the default pool would never fill: the runs must contain both
   replicas that preempt and replicas that come close without preempting;
2. observes every 15 s through :class:`llmscale.sim.exporter.SimMetricSource`,
   keeps the controller's 20-observation window, and takes each serving
   replica's features with :func:`llmscale.signals.risk.oom_features` (the
   very function the signal uses); label 1 when that replica's preemption
   counter grows within the next 60 s;
3. fits ``b0 + b1 kv + b2 slope + b3 preempt_rate`` by iteratively reweighted
   least squares (Newton's method on the log-likelihood) on standardised
   features with a small ridge (1e-3, keeps separable data finite), then maps
   the coefficients back to raw units;
4. trains on seed 1 of every scenario and reports AUC and log-loss on seed 2
   (held out), plus the base rate's log-loss for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from llmscale.signals.risk import oom_features
from llmscale.signals.window import PREEMPTIONS, FleetWindow
from llmscale.types import Observation

__all__ = [
    "SCENARIOS",
    "OomFit",
    "OomRun",
    "Scenario",
    "auc",
    "fit_oom_coefficients",
    "label_run",
    "log_loss",
    "simulate",
]

TICK_S = 15.0
HORIZON_S = 60.0
WINDOW_LEN = 20  # the controller's (llmscale.controller.core.WINDOW_LEN)
RIDGE = 1e-3


@dataclass(frozen=True)
class Scenario:
    """One simulated run: a preset at a rate scale on a fixed fleet."""

    name: str
    preset: str
    replicas: int
    rate_scale: float = 1.0
    duration_s: float = 1800.0
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("default-tight", "default", 8, gpu_memory_utilization=0.5),
    Scenario("default-ample", "default", 14, gpu_memory_utilization=0.5),
    Scenario("default-full-pool", "default", 6),
    Scenario("flash-crowd", "flash-crowd", 10, gpu_memory_utilization=0.5),
    Scenario("diurnal-half", "diurnal", 5, rate_scale=0.5, gpu_memory_utilization=0.5),
    Scenario("bandwidth-512", "bandwidth-bound", 4, max_num_seqs=512),
    Scenario("bandwidth-512-ample", "bandwidth-bound", 7, max_num_seqs=512),
    Scenario("bandwidth-underload", "bandwidth-bound", 6, rate_scale=0.5),
)


@dataclass(frozen=True)
class OomRun:
    """Training rows of one run: features ``(kv, kv_slope_per_s, preemptions_per_s)`` and 0/1 labels."""

    name: str
    features: list[tuple[float, float, float]]
    labels: list[int]


@dataclass(frozen=True)
class OomFit:
    coefficients: tuple[float, float, float, float]  # b0, b1 kv, b2 slope per s, b3 preemptions per s
    rows: int
    positives: int
    auc: float
    log_loss: float
    base_log_loss: float  # predicting the base rate everywhere


def simulate(scenario: Scenario, seed: int, perf: Any = None) -> list[Observation]:
    """Observations every 15 s of ``scenario`` (needs ``llmscale.perf`` unless ``perf`` is given)."""
    from llmscale.sim.config import SimConfig
    from llmscale.sim.exporter import SimMetricSource
    from llmscale.sim.fleet import Fleet
    from llmscale.workloads import make_preset, rate_scale

    if perf is None:
        from llmscale.perf import get_perf_model

        perf = get_perf_model("llama-3-8b", "h100-80gb", 1)
    w = make_preset(scenario.preset, seed=seed, duration_s=scenario.duration_s)
    if scenario.rate_scale != 1.0:
        w = rate_scale(w, scenario.rate_scale, seed=seed)
    cfg = SimConfig(
        gpu_memory_utilization=scenario.gpu_memory_utilization, max_num_seqs=scenario.max_num_seqs, seed=seed
    )
    fleet = Fleet(
        perf,
        cfg,
        w.arrival_s,
        w.input_tokens,
        w.output_tokens,
        initial_replicas=scenario.replicas,
        gpus_per_replica=1,
    )
    source = SimMetricSource(fleet)
    out = []
    t = TICK_S
    while t <= scenario.duration_s + 1e-9:
        fleet.run_until(t)
        out.append(source.observe(t))
        t += TICK_S
    return out


def _preemptions(o: Observation, replica: str) -> float | None:
    for s in o.replicas:
        if s.replica == replica and s.ok:
            for n in PREEMPTIONS:
                if n in s.values:
                    return s.values[n]
    return None


def label_run(name: str, observations: Sequence[Observation]) -> OomRun:
    """Features at every tick with a full horizon ahead, labelled by preemptions in the next 60 s."""
    feats: list[tuple[float, float, float]] = []
    labels: list[int] = []
    ahead = round(HORIZON_S / TICK_S)
    for i in range(len(observations) - ahead):
        window = observations[max(0, i - WINDOW_LEN + 1) : i + 1]
        fw = FleetWindow.build(window)
        later = observations[i + ahead]
        for f in oom_features(fw):
            now = _preemptions(observations[i], f.replica)
            then = _preemptions(later, f.replica)
            if now is None or then is None:
                continue  # gone or unknown a minute later: no label
            feats.append((f.kv, f.kv_slope_per_s, f.preemptions_per_s))
            labels.append(1 if then > now else 0)
    return OomRun(name, feats, labels)


def _sigmoid(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)), dtype=np.float64)


def auc(scores: Sequence[float] | npt.NDArray[np.float64], labels: Sequence[int] | npt.NDArray[Any]) -> float:
    """Area under the ROC curve by ranks (Mann-Whitney U), ties averaged. (0.1, 0.4, 0.35, 0.8) with
    labels (0, 0, 1, 1) -> 0.75."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = 0.5 * (i + j) + 1.0
        i = j + 1
    pos = int(y.sum())
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return math.nan
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def log_loss(p: npt.NDArray[np.float64], labels: npt.NDArray[Any]) -> float:
    """Mean negative log-likelihood in nats, probabilities clipped to [1e-12, 1 - 1e-12]."""
    q = np.clip(p, 1e-12, 1.0 - 1e-12)
    y = np.asarray(labels, dtype=np.float64)
    return float(-np.mean(y * np.log(q) + (1.0 - y) * np.log(1.0 - q)))


def _irls(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], ridge: float) -> npt.NDArray[np.float64]:
    """Logistic regression by Newton/IRLS; column 0 of ``x`` is the (unpenalised) intercept."""
    beta = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], ridge)
    penalty[0] = 0.0
    for _ in range(100):
        p = _sigmoid(x @ beta)
        w = p * (1.0 - p)
        grad = x.T @ (y - p) - penalty * beta
        hess = (x * w[:, None]).T @ x + np.diag(penalty) + 1e-12 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        beta = beta + step
        if float(np.max(np.abs(step))) < 1e-9:
            break
    return beta


def fit_oom_coefficients(runs: Sequence[OomRun], ridge: float = RIDGE) -> OomFit:
    """Fit ``(b0, b1, b2, b3)`` on the pooled rows of ``runs``; metrics are in-sample."""
    feats = [f for r in runs for f in r.features]
    ys = [y for r in runs for y in r.labels]
    if not feats:
        raise ValueError("no training rows: the runs produced no serving replica with a label")
    x = np.asarray(feats, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    sd[sd == 0.0] = 1.0
    z = np.column_stack([np.ones(len(x)), (x - mu) / sd])
    beta = _irls(z, y, ridge)
    raw = beta[1:] / sd
    b0 = float(beta[0] - np.sum(raw * mu))
    coef = (b0, float(raw[0]), float(raw[1]), float(raw[2]))
    p = _sigmoid(b0 + x @ raw)
    base = float(np.clip(y.mean(), 1e-12, 1 - 1e-12))
    return OomFit(
        coefficients=coef,
        rows=len(y),
        positives=int(y.sum()),
        auc=auc(p, y),
        log_loss=log_loss(p, y),
        base_log_loss=log_loss(np.full(len(y), base), y),
    )


def evaluate(coef: tuple[float, float, float, float], runs: Sequence[OomRun]) -> OomFit:
    """The metrics of fixed coefficients on other runs (held out)."""
    x = np.asarray([f for r in runs for f in r.features], dtype=np.float64)
    y = np.asarray([v for r in runs for v in r.labels], dtype=np.float64)
    p = _sigmoid(coef[0] + x @ np.asarray(coef[1:]))
    base = float(np.clip(y.mean(), 1e-12, 1 - 1e-12))
    return OomFit(coef, len(y), int(y.sum()), auc(p, y), log_loss(p, y), log_loss(np.full(len(y), base), y))


def main() -> None:
    import time

    train: list[OomRun] = []
    test: list[OomRun] = []
    for sc in SCENARIOS:
        for seed, bucket in ((1, train), (2, test)):
            t0 = time.perf_counter()
            run = label_run(f"{sc.name}/seed{seed}", simulate(sc, seed))
            bucket.append(run)
            print(
                f"{run.name:32s} rows {len(run.labels):6d} positives {sum(run.labels):6d} "
                f"({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    fit = fit_oom_coefficients(train)
    held = evaluate(fit.coefficients, test)
    b0, b1, b2, b3 = fit.coefficients
    print(
        f"train: rows {fit.rows} positives {fit.positives} AUC {fit.auc:.4f} log-loss {fit.log_loss:.4f} "
        f"(base rate {fit.base_log_loss:.4f})"
    )
    print(
        f"held out: rows {held.rows} positives {held.positives} AUC {held.auc:.4f} "
        f"log-loss {held.log_loss:.4f} (base rate {held.base_log_loss:.4f})"
    )
    print(f"OOM_COEFFICIENTS = ({b0:.4f}, {b1:.4f}, {b2:.4f}, {b3:.4f})")


if __name__ == "__main__":
    main()
