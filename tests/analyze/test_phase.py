"""Weighted DBSCAN on a constructed entropy-bandwidth phase diagram (seed 004 2.5)."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.analyze.phase import BANDWIDTH_WEIGHT, cluster_phase_diagram, zone_of

pytest.importorskip("sklearn")


def _blob(rng: np.random.Generator, h: float, u: float, n: int, spread: float = 0.01) -> np.ndarray:
    return np.column_stack([h + spread * rng.standard_normal(n), u + spread * rng.standard_normal(n)])


def test_three_patterns_and_transitions_are_recovered():
    rng = np.random.default_rng(5)
    # idle and regular / steady mid-load / bursty and bandwidth-bound, 40 ticks of 15 s each,
    # plus 6 isolated transition ticks far from every pattern
    blobs = [(0.1, 0.2), (0.5, 0.55), (0.85, 0.92)]
    pts = [_blob(rng, h, u, 40) for h, u in blobs]
    transitions = np.array([[0.3, 0.05], [0.3, 0.35], [0.7, 0.3], [0.15, 0.75], [0.95, 0.2], [0.65, 0.75]])
    all_pts = np.vstack([*pts, transitions])
    truth = np.concatenate([np.full(40, i) for i in range(3)] + [np.full(6, -1)])
    res = cluster_phase_diagram(all_pts[:, 0], all_pts[:, 1], np.full(len(all_pts), 15.0))
    assert len(res.clusters) == 3
    # every constructed pattern is one cluster, and the transitions are noise
    for i in range(3):
        labels = set(res.labels[truth == i].tolist())
        assert len(labels) == 1 and labels != {-1}
    assert set(res.labels[truth == -1].tolist()) == {-1}
    by_centre = sorted(res.clusters, key=lambda c: c.entropy)
    for c, (h, u) in zip(by_centre, blobs, strict=True):
        assert c.entropy == pytest.approx(h, abs=0.01) and c.bandwidth == pytest.approx(u, abs=0.01)
        assert c.share_of_time == pytest.approx(40 / 126)
    assert by_centre[0].zone.startswith("scale-down") and by_centre[2].zone.startswith("scale-up")
    assert by_centre[1].zone == "hold zone"


def test_bandwidth_counts_twice_in_the_distance():
    # Two patterns 0.06 apart in bandwidth, at the same entropy: the seed's distance makes that
    # 0.12 > eps 0.08 (their nearest points, 3 sigma = 0.006 each side, still 0.096 apart), so they
    # stay apart; unweighted (0.06 < 0.08) they would merge. The same 0.06 apart in entropy is
    # 0.06 < 0.08: one pattern.
    rng = np.random.default_rng(9)
    assert BANDWIDTH_WEIGHT == 2.0
    a, b = _blob(rng, 0.5, 0.40, 30, 0.002), _blob(rng, 0.5, 0.46, 30, 0.002)
    pts = np.vstack([a, b])
    res = cluster_phase_diagram(pts[:, 0], pts[:, 1], np.full(60, 15.0))
    assert len(res.clusters) == 2
    c, d = _blob(rng, 0.40, 0.5, 30, 0.002), _blob(rng, 0.46, 0.5, 30, 0.002)
    pts = np.vstack([c, d])
    assert len(cluster_phase_diagram(pts[:, 0], pts[:, 1], np.full(60, 15.0)).clusters) == 1


def test_sample_weight_is_time_a_pattern_must_hold():
    # 6 ticks at one spot: at 15 s each they hold 90 s < the 120 s a core needs: noise; at 30 s
    # each they hold 180 s: a pattern.
    pts = np.full((6, 2), 0.5)
    assert cluster_phase_diagram(pts[:, 0], pts[:, 1], np.full(6, 15.0)).clusters == ()
    res = cluster_phase_diagram(pts[:, 0], pts[:, 1], np.full(6, 30.0))
    assert len(res.clusters) == 1 and res.clusters[0].num_ticks == 6


def test_ticks_missing_a_coordinate_are_left_out():
    h = np.array([0.5, np.nan, 0.5, 0.5])
    u = np.array([0.5, 0.5, np.nan, 0.5])
    res = cluster_phase_diagram(h, u, np.full(4, 100.0))
    assert res.entropy.size == 2 and len(res.clusters) == 1


@pytest.mark.parametrize(
    ("h", "u", "zone"),
    [
        pytest.param(0.9, 0.9, "scale-up", id="seed-004-both-high"),
        pytest.param(0.1, 0.3, "scale-down", id="seed-004-both-low"),
        pytest.param(0.9, 0.3, "hold", id="random-but-idle"),
        pytest.param(0.72, 0.9, "hold", id="entropy-at-threshold"),
    ],
)
def test_zones_are_seed_004_thresholds(h: float, u: float, zone: str) -> None:
    assert zone_of(h, u).startswith(zone)
