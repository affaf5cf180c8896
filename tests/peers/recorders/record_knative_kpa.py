"""Record Knative's own KPA decisions on scripted ticks: ``tests/peers/tables/knative_kpa.json``.

Knative's ``Scale`` (``pkg/autoscaler/scaling/autoscaler.go``) and its scale-down delay window
(``pkg/autoscaler/aggregation/max``) are taken unmodified from a knative/serving checkout at the
pinned tag and compiled with Go beside this directory's harness: ``knative_kpa/serving`` (the few
declarations the file takes from the rest of its package, a scripted metric client and pod
counter, a main) and ``knative_kpa/stubs`` (no-op loggers and metric types for the imports Scale
only logs or records through). Nothing is fetched: the build runs with GOPROXY=off.

    python tests/peers/recorders/record_knative_kpa.py --serving-git /path/to/serving/.git

The table pins the version; ``tests/peers/test_knative_recorded.py`` replays each scenario through
llmscale's port and fails when a decision differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_harness import go_version, resolve, run_harness

HERE = Path(__file__).resolve().parent
TABLE = HERE.parent / "tables" / "knative_kpa.json"
TAG = "knative-v1.23.0"
REAL_FILES = (
    "pkg/autoscaler/scaling/autoscaler.go",
    "pkg/autoscaler/aggregation/max/timewindow.go",
    "pkg/autoscaler/aggregation/max/window.go",
)
STUB_MODULES = {
    "go.uber.org/zap": "zap",
    "go.opentelemetry.io/otel": "otel",
    "k8s.io/apimachinery": "apimachinery",
    "github.com/davecgh/go-spew": "spew",
}

DEFAULT = {
    "target_value": 70.0, "total_value": 100.0, "panic_threshold": 2.0, "max_scale_up_rate": 1000.0,
    "max_scale_down_rate": 2.0, "stable_window_s": 60.0, "scale_down_delay_s": 0.0, "reachable": True,
}  # fmt: skip


def _ticks(rows: list[tuple[float, int, float, float]]) -> list[dict[str, object]]:
    return [{"time_s": t, "ready": r, "stable": s, "panic": p} for t, r, s, p in rows]


def scenarios() -> list[dict[str, object]]:
    """Situations that exercise each branch of Scale, as (time s, ready pods, stable, panic)."""
    every2 = [float(t) for t in range(0, 200, 2)]
    surge = [(t, 2, 100.0 + 5 * t, 400.0 if t < 40 else 120.0) for t in every2]
    return [
        {"name": "steady-load-one-pod", "spec": DEFAULT,
         "ticks": _ticks([(t, 1, 50.0, 50.0) for t in every2[:10]])},
        {"name": "grows-within-stable-mode", "spec": DEFAULT,
         "ticks": _ticks([(t, 2, 60.0 + 4 * t, 60.0 + 4 * t) for t in every2[:30]])},
        {"name": "idle-fleet-halves-per-tick", "spec": DEFAULT,
         "ticks": _ticks([(0.0, 1, 0.0, 0.0), (2.0, 10, 0.0, 0.0), (4.0, 5, 0.0, 0.0), (6.0, 3, 0.0, 0.0),
                          (8.0, 1, 0.0, 0.0), (10.0, 0, 0.0, 0.0)])},
        {"name": "starts-in-panic-holding-ready-pods", "spec": DEFAULT,
         "ticks": _ticks([(t, 6, 10.0, 10.0) for t in every2[:40]])},
        {"name": "surge-panics-ratchets-then-calms", "spec": DEFAULT, "ticks": _ticks(surge)},
        {"name": "panic-threshold-exactly-200-percent", "spec": DEFAULT,
         "ticks": _ticks([(0.0, 1, 10.0, 10.0), (2.0, 2, 100.0, 280.0), (4.0, 2, 100.0, 279.0),
                          (6.0, 4, 100.0, 100.0)])},
        {"name": "no-data-ticks", "spec": DEFAULT,
         "ticks": [{"time_s": 0.0, "ready": 1, "stable": 80.0, "panic": 80.0},
                   {"time_s": 2.0, "ready": 1, "stable": 0.0, "panic": 0.0, "no_data": True},
                   {"time_s": 4.0, "ready": 2, "stable": 150.0, "panic": 150.0}]},
        {"name": "scale-down-delay-30s", "spec": {**DEFAULT, "scale_down_delay_s": 30.0},
         "ticks": _ticks([(t, 1 if t < 4 else 5, 300.0 if t < 10 else 20.0, 300.0 if t < 10 else 20.0)
                          for t in every2[:40]])},
        {"name": "unreachable-revision-no-scale-down-floor", "spec": {**DEFAULT, "reachable": False},
         "ticks": _ticks([(0.0, 1, 0.0, 0.0), (2.0, 1, 0.0, 0.0), (4.0, 8, 0.0, 0.0)])},
        {"name": "slow-scale-up-rate", "spec": {**DEFAULT, "max_scale_up_rate": 1.5, "target_value": 10.0},
         "ticks": _ticks([(0.0, 1, 5.0, 5.0), (2.0, 1, 95.0, 95.0), (4.0, 2, 95.0, 95.0),
                          (6.0, 3, 95.0, 95.0), (8.0, 5, 95.0, 95.0)])},
        {"name": "small-target-fractional-load", "spec": {**DEFAULT, "target_value": 0.7},
         "ticks": _ticks([(0.0, 1, 0.69, 0.69), (2.0, 1, 0.71, 0.71), (4.0, 2, 1.41, 3.2),
                          (6.0, 3, 1.0, 0.1)])},
    ]  # fmt: skip


def record(serving_git: Path, tag: str) -> dict[str, object]:
    commit = resolve(serving_git, tag)
    stubs = {m: HERE / "knative_kpa" / "stubs" / d for m, d in STUB_MODULES.items()}
    out = run_harness(
        HERE / "knative_kpa" / "serving", "knative.dev/serving", serving_git, commit, REAL_FILES, stubs,
        json.dumps(scenarios()),
    )  # fmt: skip
    return {
        "source": "knative/serving",
        "tag": tag,
        "commit": commit,
        "files": list(REAL_FILES),
        "recorded_with": go_version(),
        "scenarios": json.loads(out),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serving-git", type=Path, required=True, help="git dir of a knative/serving clone")
    ap.add_argument("--tag", default=TAG)
    ap.add_argument("--out", type=Path, default=TABLE)
    args = ap.parse_args()
    doc = record(args.serving_git, args.tag)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    n = sum(len(s["ticks"]) for s in doc["scenarios"])  # type: ignore[union-attr]
    print(f"{args.out}: {len(doc['scenarios'])} scenarios, {n} ticks, {args.tag} ({doc['commit'][:12]})")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
