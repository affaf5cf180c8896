"""Record AIBrix's own APA recommendations: ``tests/peers/tables/aibrix_apa.json``.

APA's ``computeTargetReplicas`` (``pkg/controller/podautoscaler/algorithm/apa.go`` of
vllm-project/aibrix at the pinned tag, unmodified) is compiled offline beside
``aibrix_apa/aibrix`` (a ScalingContext answered from one case, the declarations apa.go takes
from algorithm.go, a main) with a no-op klog (``aibrix_apa/stubs``), and run on a grid of cases:
current replicas x per-pod value around the target's tolerance band, with AIBrix's default
tolerances and rates and a few others.

    python tests/peers/recorders/record_aibrix_apa.py --aibrix-git /path/to/aibrix/.git

``tests/peers/test_aibrix_recorded.py`` replays every case through llmscale's ``apa_replicas``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_harness import go_version, resolve, run_harness

HERE = Path(__file__).resolve().parent
TABLE = HERE.parent / "tables" / "aibrix_apa.json"
TAG = "v0.7.0"
REAL_FILES = ("pkg/controller/podautoscaler/algorithm/apa.go",)


def cases() -> list[dict[str, float]]:
    """Current replicas 1-9 and 17 x values from far below to far above the target, with the
    defaults (tolerance 0.1, rates 2), then a tight band and slow rates; values on the band edges
    (0.9 and 1.1 of the target) and just inside and outside them."""
    ratios = (0.0, 0.05, 0.3, 0.5, 0.89, 0.9, 0.91, 1.0, 1.09, 1.1, 1.11, 1.5, 2.0, 3.7, 10.0)
    keys = ("target", "up_tolerance", "down_tolerance", "max_scale_up_rate", "max_scale_down_rate")
    grids = [
        dict(zip(keys, (0.5, 0.1, 0.1, 2.0, 2.0), strict=True)),  # KV usage, AIBrix's defaults
        dict(zip(keys, (100.0, 0.1, 0.1, 2.0, 2.0), strict=True)),  # queue per pod
        dict(zip(keys, (0.7, 0.0, 0.25, 1.5, 3.0), strict=True)),
    ]
    out = []
    for grid, current, ratio in itertools.product(grids, (1, 2, 3, 4, 5, 7, 9, 17), ratios):
        out.append({**grid, "current": current, "value": round(ratio * grid["target"], 6)})
    return out


def record(aibrix_git: Path, tag: str) -> dict[str, object]:
    commit = resolve(aibrix_git, tag)
    stubs = {"k8s.io/klog/v2": HERE / "aibrix_apa" / "stubs" / "klog"}
    table = cases()
    out = run_harness(
        HERE / "aibrix_apa" / "aibrix", "github.com/vllm-project/aibrix", aibrix_git, commit, REAL_FILES,
        stubs, json.dumps(table),
    )  # fmt: skip
    replicas = json.loads(out)
    return {
        "source": "vllm-project/aibrix",
        "tag": tag,
        "commit": commit,
        "files": list(REAL_FILES),
        "recorded_with": go_version(),
        "cases": [{**c, "replicas": r} for c, r in zip(table, replicas, strict=True)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aibrix-git", type=Path, required=True, help="git dir of a vllm-project/aibrix clone")
    ap.add_argument("--tag", default=TAG)
    ap.add_argument("--out", type=Path, default=TABLE)
    args = ap.parse_args()
    doc = record(args.aibrix_git, args.tag)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{args.out}: {len(doc['cases'])} cases, {args.tag} ({str(doc['commit'])[:12]})")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
