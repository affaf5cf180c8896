"""``llmscale diagnose``: ghost replicas and drift findings over a decision log or a range.

A finding is an *episode*: consecutive ticks over which a diagnostic held (a tick without the
number ends an episode; unknown is not "still there").

* **ghost replicas** (seed 000 chapter 1; the signal in ``signals/diagnostics.py``): ticks with
  ``ghost_replicas`` > 0. The finding carries the replica-hours held for nothing: the count
  times the tick's duration (2 ghosts over 10 ticks of 15 s = 300 replica-seconds, 0.083 h).
* **tenant drift** (seed 000 2.5): ``tenant_drift`` above :data:`TENANT_DRIFT_WARN` = 0.25,
  the CV over replicas of utilisation per running request. Worked: four replicas, one needing
  2x the others' utilisation per request -- (1, 1, 1, 2): mean 1.25, std 0.433, CV 0.35, a
  finding; one at 1.5x -- (1, 1, 1, 1.5): CV 0.19, not one. ``deploy/prometheus`` alerts on
  the same threshold held for 10 minutes (``LlmscaleTenantDrift``).
* **model drift** (``controller/drift.py``): a ratio observed / predicted of inter-token or
  first-token latency outside 1 +- 0.15, the controller's own warning band.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llmscale.analyze.log import TickTable

__all__ = ["DRIFT_MIN_DURATION_S", "MODEL_DRIFT_WARN", "TENANT_DRIFT_WARN", "Finding", "diagnose_table"]

TENANT_DRIFT_WARN = 0.25
#: A drift shorter than this is not a finding: at a 2 s tick a replica that has just become ready,
#: with one request, reads a high CV for a tick or two (``knative-kpa`` on the default workload:
#: 8 episodes over 30 minutes, 6 of them 1-2 ticks, two of 13 ticks = 26 s); the alert holds 10 minutes.
DRIFT_MIN_DURATION_S = 60.0
#: controller/drift.py's default ``warn``
MODEL_DRIFT_WARN = 0.15


@dataclass(frozen=True)
class Finding:
    kind: str
    start_s: float
    end_s: float
    num_ticks: int
    #: the largest value of the diagnostic over the episode
    peak: float
    detail: str

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def _episodes(flag: np.ndarray) -> list[tuple[int, int]]:
    """[first, last] index pairs of runs of True."""
    out: list[tuple[int, int]] = []
    start = None
    for i, f in enumerate(flag):
        if f and start is None:
            start = i
        elif not f and start is not None:
            out.append((start, i - 1))
            start = None
    if start is not None:
        out.append((start, flag.size - 1))
    return out


def _constant(text: str) -> Callable[[int, int], str]:
    return lambda a, b: text


def _findings(
    table: TickTable,
    kind: str,
    values: np.ndarray,
    test: Callable[[np.ndarray], np.ndarray],
    peak_of: Callable[[np.ndarray], float],
    detail: Callable[[int, int], str],
    min_duration_s: float = 0.0,
) -> list[Finding]:
    with np.errstate(invalid="ignore"):
        flag = np.isfinite(values) & test(values)
    tick = table.tick_s()
    out = []
    for a, b in _episodes(flag):
        if table.time_s[b] + tick[b] - table.time_s[a] < min_duration_s - 1e-9:
            continue
        out.append(
            Finding(
                kind=kind,
                start_s=float(table.time_s[a]),
                end_s=float(table.time_s[b] + tick[b]),
                num_ticks=b - a + 1,
                peak=peak_of(values[a : b + 1]),
                detail=detail(a, b),
            )
        )
    return out


def diagnose_table(
    table: TickTable, *, min_duration_s: float = DRIFT_MIN_DURATION_S
) -> tuple[list[Finding], list[str]]:
    """The findings in time order, and what could not be checked (the log lacks the numbers).

    A drift episode shorter than ``min_duration_s`` is left out (a ghost needs 60 s by its own
    definition already)."""
    findings: list[Finding] = []
    unchecked: list[str] = []
    tick = table.tick_s()
    ghosts = table.quantity("ghost_replicas")
    if ghosts is None:
        unchecked.append("ghost replicas: no ghost_replicas in the log")
    else:

        def ghost_detail(a: int, b: int) -> str:
            held_h = float(np.nansum(ghosts[a : b + 1] * tick[a : b + 1])) / 3600.0
            return f"VRAM resident, GPU idle, no request: {held_h:.3g} replica-hours held for nothing"

        findings += _findings(
            table, "ghost replicas", ghosts, lambda v: v > 0, lambda v: float(v.max()), ghost_detail
        )
    drift = table.quantity("tenant_drift")
    if drift is None:
        unchecked.append("tenant drift: no tenant_drift in the log")
    else:
        findings += _findings(
            table,
            "tenant drift",
            drift,
            lambda v: v > TENANT_DRIFT_WARN,
            lambda v: float(v.max()),
            lambda a, b: f"utilisation per request differs across replicas (CV > {TENANT_DRIFT_WARN})",
            min_duration_s,
        )
    for q in ("itl", "ttft"):
        col = table.signals.get(f"model_drift_{q}_ratio")
        if col is None or not np.isfinite(col).any():
            unchecked.append(f"model drift ({q}): no model_drift_{q}_ratio in the log")
            continue
        text = (
            f"observed / predicted {q.upper()} outside 1 +- {MODEL_DRIFT_WARN}: "
            "the step-time model no longer matches the engine"
        )
        findings += _findings(
            table,
            f"model drift ({q})",
            col,
            lambda v: np.abs(v - 1.0) > MODEL_DRIFT_WARN,
            lambda v: float(v[np.argmax(np.abs(v - 1.0))]),
            _constant(text),
            min_duration_s,
        )
    findings.sort(key=lambda f: (f.start_s, f.kind))
    return findings, unchecked
