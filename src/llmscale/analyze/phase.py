"""The entropy-bandwidth phase diagram and its load patterns (seed 004 2.5).

Seed 004 2.5 puts every sampling window at (queue entropy H, bandwidth utilisation U) and
clusters the points with DBSCAN under a weighted Euclidean distance,
``sqrt((H1 - H2)^2 + 4 (U1 - U2)^2)``: entropy weight 1, bandwidth weight 2, "so that a small
change of bandwidth, which announces a change of pattern at high throughput, counts double".
The same distance is the plain Euclidean one on ``(H, 2 U)``, which is what DBSCAN is given.

Each tick is a point; ``sample_weight`` is the seconds it stands for (the gap to the next
tick), so ``min_weight_s`` is the *time* a pattern must hold inside an ``eps`` neighbourhood to
be a core of a cluster, whatever the policy's tick (2 s for Knative, 15 s for ``slo``). Points
in no cluster are noise (label -1): transitions between patterns.

H is the catalogue's ``queue_entropy``, normalised to [0, 1] (the seed's bits divided by their
maximum), U the P95 bandwidth saturation in [0, 1]; the seed's own cluster table is in bits, so
its ranges are not comparable, but its decision thresholds are (seed 004 chapter 1: scale up at
U > 0.85 and H > 0.72, down at U < 0.4 and H < 0.25), and each cluster is named by the zone its
centre falls in. Imports scikit-learn when called.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["BANDWIDTH_WEIGHT", "PatternCluster", "PhaseClusters", "cluster_phase_diagram", "zone_of"]

#: seed 004 2.5's weighted distance: bandwidth differences count twice entropy's
BANDWIDTH_WEIGHT = 2.0


@dataclass(frozen=True)
class PatternCluster:
    label: int
    entropy: float
    bandwidth: float
    share_of_time: float
    num_ticks: int
    zone: str


@dataclass(frozen=True)
class PhaseClusters:
    entropy: np.ndarray
    bandwidth: np.ndarray
    weight_s: np.ndarray
    labels: np.ndarray
    clusters: tuple[PatternCluster, ...]
    eps: float
    min_weight_s: float


def zone_of(entropy: float, bandwidth: float) -> str:
    """Seed 004 chapter 1's decision zones for a point of the phase diagram."""
    if bandwidth > 0.85 and entropy > 0.72:
        return "scale-up zone (bandwidth-bound, random arrivals)"
    if bandwidth < 0.4 and entropy < 0.25:
        return "scale-down zone (idle, regular arrivals)"
    return "hold zone"


def cluster_phase_diagram(
    entropy: np.ndarray,
    bandwidth: np.ndarray,
    weight_s: np.ndarray,
    *,
    eps: float = 0.08,
    min_weight_s: float = 120.0,
) -> PhaseClusters:
    """Weighted DBSCAN over the ticks that have both coordinates (the others are dropped).

    Pre: the three arrays are aligned per tick; ``weight_s`` > 0.
    """
    from sklearn.cluster import DBSCAN

    h = np.asarray(entropy, float)
    u = np.asarray(bandwidth, float)
    w = np.asarray(weight_s, float)
    # the weighted coordinate too: a bandwidth of 1e308 doubles to inf, which DBSCAN refuses
    with np.errstate(over="ignore"):
        ok = np.isfinite(h) & np.isfinite(BANDWIDTH_WEIGHT * u) & np.isfinite(w) & (w > 0)
    h, u, w = h[ok], u[ok], w[ok]
    if h.size == 0:
        labels = np.empty(0, dtype=int)
    else:
        features = np.column_stack([h, BANDWIDTH_WEIGHT * u])
        labels = (
            DBSCAN(eps=eps, min_samples=max(1, math.ceil(min_weight_s)))
            .fit(features, sample_weight=w)
            .labels_
        )
    total = float(w.sum()) or 1.0
    clusters = []
    for lab in sorted(set(labels.tolist()) - {-1}):
        sel = labels == lab
        ch = float(np.average(h[sel], weights=w[sel]))
        cu = float(np.average(u[sel], weights=w[sel]))
        clusters.append(
            PatternCluster(
                label=int(lab),
                entropy=ch,
                bandwidth=cu,
                share_of_time=float(w[sel].sum()) / total,
                num_ticks=int(sel.sum()),
                zone=zone_of(ch, cu),
            )
        )
    return PhaseClusters(h, u, w, labels, tuple(clusters), eps, min_weight_s)
