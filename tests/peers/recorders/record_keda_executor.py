"""Record KEDA's own activation and scale-to-zero decisions: ``tests/peers/tables/keda_executor.json``.

KEDA's scale executor for ScaledObjects (``pkg/scaling/executor/scale_scaledobjects.go`` of
kedacore/keda at the pinned tag, unmodified; ``RequestScale``, ``scaleToZeroOrIdle``,
``scaleFromZeroOrIdle``) is compiled offline beside ``keda_executor/keda`` (the ScaledObject fields
and conditions it uses, the declarations it takes from ``scale_executor.go``, an in-memory scale
subresource, a main) with stub logr and Kubernetes API types (``keda_executor/stubs``). This is
the part of KEDA above the HPA: activation from zero, the cooldown before scaling to zero, and
raising a target below ``minReplicaCount`` while inactive.

    python tests/peers/recorders/record_keda_executor.py --keda-git /path/to/keda/.git

Cases: the target's replicas (0, 1, 3) x the trigger active or not x ``minReplicaCount`` 0, 1, 2
x ``cooldownPeriod`` default (300 s) or 60 s x time since ``lastActiveTime`` (never active, and on
both sides of each cooldown, a few seconds clear of it: the executor compares with the wall clock).
``tests/peers/test_keda_recorded.py`` replays every case through ``keda-queue``'s ``decide``.
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
TABLE = HERE.parent / "tables" / "keda_executor.json"
TAG = "v2.20.2"
REAL_FILES = ("pkg/scaling/executor/scale_scaledobjects.go",)


def cases() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for current, active, min_replicas, cooldown in itertools.product(
        (0, 1, 3), (True, False), (0, 1, 2), (None, 60)
    ):
        period = 300 if cooldown is None else cooldown
        for idle in (None, 5.0, period - 5.0, period + 5.0, 3600.0):
            out.append({"current": current, "active": active, "min_replicas": min_replicas,
                        "cooldown_period_s": cooldown, "idle_s": idle})  # fmt: skip
    return out


def record(keda_git: Path, tag: str) -> dict[str, object]:
    commit = resolve(keda_git, tag)
    stubs = {
        "github.com/go-logr/logr": HERE / "keda_executor" / "stubs" / "logr",
        "k8s.io/api": HERE / "keda_executor" / "stubs" / "api",
        "k8s.io/apimachinery": HERE / "keda_executor" / "stubs" / "apimachinery",
    }
    table = cases()
    out = run_harness(
        HERE / "keda_executor" / "keda", "github.com/kedacore/keda/v2", keda_git, commit, REAL_FILES, stubs,
        json.dumps(table),
    )  # fmt: skip
    results = json.loads(out)
    return {
        "source": "kedacore/keda",
        "tag": tag,
        "commit": commit,
        "files": list(REAL_FILES),
        "recorded_with": go_version(),
        "cases": [{**c, **r} for c, r in zip(table, results, strict=True)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keda-git", type=Path, required=True, help="git dir of a kedacore/keda clone")
    ap.add_argument("--tag", default=TAG)
    ap.add_argument("--out", type=Path, default=TABLE)
    args = ap.parse_args()
    doc = record(args.keda_git, args.tag)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{args.out}: {len(doc['cases'])} cases, {args.tag} ({str(doc['commit'])[:12]})")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
