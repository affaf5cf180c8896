"""Record the llm-d Workload Variant Autoscaler's own saturation analysis.

The table: ``tests/peers/tables/wva_saturation.json``.

WVA's V1 analyzer, ``internal/saturation/analyzer.go`` of llm-d-incubation/workload-variant-autoscaler
(Go module ``github.com/llm-d/llm-d-workload-variant-autoscaler``) at the pinned commit, unmodified, is
compiled offline beside ``wva_saturation/wva`` (the fields of the ``interfaces`` types it uses, its
logging levels, a span-less tracer, the package constant it takes, a main) with a discarding
controller-runtime logger and OpenTelemetry attributes (``wva_saturation/stubs``). Each case runs
``AnalyzeModelSaturation`` and then ``CalculateSaturationTargets`` for one variant.

The file is given as a path, not taken from a clone: the git snapshot of the repository available
when this was recorded (main of 2025-10-29) predates ``internal/saturation``; the file at the pinned
commit was taken from a public code index and its SHA-256 is written to the table, so a re-recording
from a clone can be checked against it (``git show <commit>:internal/saturation/analyzer.go | sha256sum``).

    python tests/peers/recorders/record_wva_saturation.py --analyzer /path/to/analyzer.go

Cases: three threshold sets (the ``capacity-scaling-config`` defaults and the documented production
and development overrides) x 1-8 pods with per-pod KV usage and waiting-queue lengths drawn (seeded)
around the thresholds, plus hand-picked cases on the thresholds and the docs' worked examples; the
replica state is stable (the model's replicas all report metrics) or in transition (a replica without
metrics, or pending pods). ``tests/peers/test_wva_recorded.py`` replays every case through llmscale's
``analyze_saturation`` and ``saturation_target``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_harness import go_version, run_harness_texts

HERE = Path(__file__).resolve().parent
TABLE = HERE.parent / "tables" / "wva_saturation.json"
COMMIT = "36587f8c5d7b140ecb179dadfeb895362e6826bc"
REAL_FILE = "internal/saturation/analyzer.go"
MODULE = "github.com/llm-d/llm-d-workload-variant-autoscaler"

#: (kv_cache_threshold, queue_length_threshold, kv_spare_trigger, queue_spare_trigger)
THRESHOLDS = {
    "default": (0.80, 5.0, 0.10, 3.0),
    "production": (0.70, 3.0, 0.20, 5.0),
    "development": (0.90, 15.0, 0.05, 2.0),
}
KEYS = ("kv_cache_threshold", "queue_length_threshold", "kv_spare_trigger", "queue_spare_trigger")


def _case(name: str, kv: list[float], queue: list[int], current: int, pending: int = 0) -> dict[str, object]:
    return {"config": dict(zip(KEYS, THRESHOLDS[name], strict=True)), "thresholds": name,
            "kv": kv, "queue": queue, "current": current, "desired": 0, "pending": pending}  # fmt: skip


def cases(seed: int = 20251206) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    # the docs' worked examples and the threshold edges, default thresholds
    for kv, queue in (
        ([0.75, 0.72], [0, 0]),
        ([0.40] * 3, [0] * 3),
        ([0.50] * 3, [0] * 3),
        ([0.80, 0.10], [0, 0]),
        ([0.79, 0.10], [4, 0]),
        ([0.10, 0.10], [5, 0]),
        ([0.0, 0.0], [0, 0]),
        ([0.7, 0.7], [2, 2]),
        ([0.8, 0.8, 0.8], [0, 0, 0]),
        ([0.45, 0.45], [1, 1]),
        ([0.35, 0.35], [1, 1]),
        ([0.3], [0]),
    ):
        out.append(_case("default", kv, queue, len(kv)))
    # seeded mixes: each pod idle, loaded, near a threshold or saturated
    for name, (kv_t, q_t, _, _) in THRESHOLDS.items():
        for _ in range(100):
            n = rng.choice((1, 2, 2, 3, 3, 4, 5, 8))
            kv, queue = [], []
            for _ in range(n):
                mode = rng.choice(("idle", "loaded", "edge", "saturated"))
                if mode == "idle":
                    kv.append(round(rng.uniform(0.0, 0.3 * kv_t), 3))
                    queue.append(0)
                elif mode == "loaded":
                    kv.append(round(rng.uniform(0.3 * kv_t, kv_t), 3))
                    queue.append(rng.randrange(0, int(q_t)))
                elif mode == "edge":
                    kv.append(round(kv_t + rng.choice((-0.01, 0.0, 0.01)), 3))
                    queue.append(int(q_t) + rng.choice((-1, 0)))
                else:
                    kv.append(round(rng.uniform(kv_t, 1.0), 3))
                    queue.append(rng.randrange(int(q_t), 3 * int(q_t)))
            state = rng.random()
            if state < 0.75:
                out.append(_case(name, kv, queue, n))
            elif state < 0.9:  # a replica that reports no metrics yet
                out.append(_case(name, kv, queue, n + 1))
            else:  # pods not ready: they report no metrics and count as pending
                out.append(_case(name, kv, queue, n + 1, pending=1))
    return out


def record(analyzer: Path, commit: str) -> dict[str, object]:
    text = analyzer.read_text()
    stubs = {
        "sigs.k8s.io/controller-runtime": HERE / "wva_saturation" / "stubs" / "controller-runtime",
        "go.opentelemetry.io/otel": HERE / "wva_saturation" / "stubs" / "otel",
    }
    table = cases()
    harness = HERE / "wva_saturation" / "wva"
    out = run_harness_texts(harness, MODULE, {REAL_FILE: text}, stubs, json.dumps(table))
    results = json.loads(out)
    return {
        "source": "llm-d-incubation/workload-variant-autoscaler",
        "commit": commit,
        "files": [REAL_FILE],
        "sha256": {REAL_FILE: hashlib.sha256(text.encode()).hexdigest()},
        "recorded_with": go_version(),
        "cases": [{**c, **r} for c, r in zip(table, results, strict=True)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--analyzer", type=Path, required=True, help=f"{REAL_FILE} at --commit")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--out", type=Path, default=TABLE)
    args = ap.parse_args()
    doc = record(args.analyzer, args.commit)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{args.out}: {len(doc['cases'])} cases, {args.commit[:12]}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
