"""Statistics of a backtest repeated over seeds (``llmscale backtest --seeds N``).

Each seed regenerates what is random in a backtest (a synthetic or rate-scaled workload, a
ServeGen trace's arrivals, the simulator's draws), and every policy runs on every seed. So
the runs of two policies on one seed share their workload: they are *paired*, and the
difference between two policies is judged on the per-seed differences, not on two separate
means. Pairing removes the seed-to-seed swing the policies share: on a workload whose peak
moves by 5% between seeds both a policy's GPU-hours and its rival's move with it, and the
per-seed difference keeps only how the two policies differ.

The numbers:

* a metric's 95% interval is ``mean ± t(0.975, N-1) * sd / sqrt(N)`` over the N per-seed
  values (Student's t; with 3 seeds ``t = 4.30``, so three values 0.90, 0.91, 0.92 give
  0.910 ± 0.025);
* two policies are *within noise* on a metric when the same interval of their paired
  per-seed differences contains 0 (a paired t-test at 5%). A policy run twice under two
  names gives differences of exactly 0 on every seed: within noise. The same policy at twice
  the replicas pays twice the GPU-hours on every seed, a difference with no spread: not.

The design document (seed 004, section 4.3) calibrates its thresholds on live A/B traffic
with 3-sigma rules on a sliding window; it states no test for comparing two policies, so
this module uses the paired t interval above, the textbook test for a handful of paired runs
(a bootstrap on 3 to 10 differences has too few resamples to trust its tails).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CONFIDENCE",
    "MAX_SEEDS",
    "SEED_METRICS",
    "Interval",
    "add_seed_statistics",
    "compare_pairs",
    "interval",
    "paired_difference",
    "seed_block",
]

#: ``--seeds`` accepts 1..MAX_SEEDS: 100 seeds of the default hour already cost 100 backtests.
MAX_SEEDS: Final = 100
#: Two-sided confidence of every interval.
CONFIDENCE: Final = 0.95
#: The metrics summarised over seeds (keys of a result row).
SEED_METRICS: Final = ("slo_attainment", "gpu_hours")
#: Where each metric can lie: a reported interval is clipped to it (three attainments 0.9992,
#: 0.9998, 1.0 give 0.99967 ± 0.0010, whose upper end 1.00067 no run can reach).
_RANGE: Final = {"slo_attainment": (0.0, 1.0), "gpu_hours": (0.0, math.inf)}


@dataclass(frozen=True)
class Interval:
    """Mean of N per-seed values and its two-sided 95% interval (Student's t)."""

    mean: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0

    def contains(self, x: float) -> bool:
        # A tolerance of 1e-12 of the scale: differences of exactly 0 computed as 1e-17.
        tol = 1e-12 * max(1.0, abs(self.mean))
        return self.low - tol <= x <= self.high + tol


def _t_quantile(df: int) -> float:
    from scipy.stats import t  # lazy: scipy costs ~0.3 s to import

    return float(t.ppf(0.5 + CONFIDENCE / 2.0, df))


def interval(values: Sequence[float]) -> Interval:
    """The mean of ``values`` and its 95% t interval; one value gives a zero-width interval.

    Raises ValueError on an empty sequence or a non-finite value.
    """
    n = len(values)
    if n == 0:
        raise ValueError("interval of no values")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"interval of non-finite values: {list(values)}")
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(mean, mean, mean)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = _t_quantile(n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[Interval, bool]:
    """Interval of the per-seed differences ``a - b`` and whether it is within noise (holds 0)."""
    if len(a) != len(b):
        raise ValueError(f"paired values need the same seeds: {len(a)} vs {len(b)}")
    diff = interval([x - y for x, y in zip(a, b, strict=True)])
    return diff, diff.contains(0.0)


def _values(summary: Mapping[str, Any], key: str) -> float | None:
    v = summary.get(key)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def seed_block(seeds: Sequence[int], summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``seeds`` entry of one result row: per-seed values, mean and 95% interval per metric.

    A metric missing on any seed (no requests: attainment None) has ``mean`` None.
    """
    block: dict[str, Any] = {"seeds": list(seeds)}
    for key in SEED_METRICS:
        values = [_values(s, key) for s in summaries]
        entry: dict[str, Any] = {"values": values}
        present = [v for v in values if v is not None]
        if len(present) == len(values):
            iv = interval(present)
            lo, hi = _RANGE[key]
            entry.update(
                mean=round(iv.mean, 9),
                ci95=[round(max(lo, iv.low), 9), round(min(hi, iv.high), 9)],
                # the t interval's half-width, before clipping: what "mean ± h" prints
                half_width=round(iv.half_width, 9),
            )
        else:
            entry.update(mean=None, ci95=None, half_width=None)
        block[key] = entry
    return block


def compare_pairs(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of rows (each carrying a :func:`seed_block`) on every metric, paired over seeds.

    One entry per (metric, a, b) with a before b in ``rows``: the mean difference ``a - b``, its
    95% interval and ``within_noise``. Pairs with a missing value are left out.
    """
    out: list[dict[str, Any]] = []
    for key in SEED_METRICS:
        for i, ra in enumerate(rows):
            for rb in rows[i + 1 :]:
                va, vb = ra["seeds"][key]["values"], rb["seeds"][key]["values"]
                if None in va or None in vb:
                    continue
                diff, noise = paired_difference(va, vb)
                out.append(
                    {
                        "metric": key,
                        "a": ra["policy"],
                        "b": rb["policy"],
                        "mean_difference": round(diff.mean, 9),
                        "ci95": [round(diff.low, 9), round(diff.high, 9)],
                        "within_noise": noise,
                    }
                )
    return out


def add_seed_statistics(
    doc: dict[str, Any],
    seeds: Sequence[int],
    runs: Sequence[tuple[Sequence[Any], Any, Any]],
) -> dict[str, Any]:
    """Add the statistics over seeds to a backtest document built from the first seed's run.

    ``runs[k]`` is :func:`~llmscale.backtest.compare.run_backtest_seeds`' (results, oracle,
    lines) for ``seeds[k]``. Every result row (and the oracle) gets a ``seeds`` entry
    (:func:`seed_block`); the row's other fields stay those of the first seed's run. The
    document gets a top-level ``seeds`` entry: the seeds, the confidence, the method and the
    paired comparison of every two policies (:func:`compare_pairs`; the oracle is left out:
    it plans with hindsight, so "beating" it is no finding). Returns ``doc``.
    """
    if len(seeds) != len(runs):
        raise ValueError(f"{len(seeds)} seeds but {len(runs)} runs")
    for i, row in enumerate(doc["results"]):
        row["seeds"] = seed_block(seeds, [run[0][i].summary for run in runs])
    if doc.get("oracle") is not None:
        doc["oracle"]["seeds"] = seed_block(seeds, [run[1].summary for run in runs])
    doc["seeds"] = {
        "seeds": list(seeds),
        "confidence": CONFIDENCE,
        "method": "Student t interval over seeds; policies compared on paired per-seed differences",
        "comparisons": compare_pairs(doc["results"]),
    }
    return doc
