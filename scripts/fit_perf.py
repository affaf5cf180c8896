#!/usr/bin/env python3
"""Fit llmscale's step-time coefficients to the public calibration measurements.

Usage::

    .venv/bin/python scripts/fit_perf.py [CALIBRATION_DIR] [--out PATH] [--check]

CALIBRATION_DIR defaults to ``<repo>/../shared/data/calibration``. Writes
``src/llmscale/perf/coefficients.json`` (derived coefficients only; no data is
copied) with the data sources (and their SHA-256), the fit / held-out split,
the held-out errors, the sanity anchors and the numpy / scipy versions it ran
with, and each parameter's uncertainty and the rows that determine it.
Deterministic: the same data and library versions give byte-identical output;
other versions land on the same optimum within a tenth of each parameter's
uncertainty (tests/perf/test_perf_fidelity.py; docs/performance-model-fit.md).
``--check`` fits and compares with the committed file instead of writing (exit 1
if they differ byte for byte).

See :mod:`llmscale.offline.calibration` for the points and :mod:`llmscale.offline.perf_fit`
for the model and the optimiser set-up.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from llmscale.offline.calibration import load_points  # noqa: E402
from llmscale.offline.perf_fit import build_document  # noqa: E402

#: File (relative to the calibration dir) -> upstream origin and licence.
SOURCES = {
    "vidur/compute": "microsoft/vidur data/profiling/compute (MIT)",
    "vidur/network/a100_dgx/all_reduce.csv": "microsoft/vidur data/profiling/network (MIT)",
    "vidur/network/h100_dgx/all_reduce.csv": "microsoft/vidur data/profiling/network (MIT)",
    "vidur/old/a100_attention.csv": "microsoft/vidur, older commit (MIT)",
    "vidur/old/a100_cpu_overheads_57720ca.csv": "microsoft/vidur, commit 57720ca (MIT)",
    "splitwise/perf_model.csv": "Mutinifni/splitwise-sim (MIT)",
    "sarathi/figure-2_decode.csv": "microsoft/sarathi-serve osdi-experiments/figure-2 (Apache-2.0)",
    "sarathi/figure-2_prefill.csv": "microsoft/sarathi-serve osdi-experiments/figure-2 (Apache-2.0)",
    "sarathi/figure-9_chunking-overhead.csv": (
        "microsoft/sarathi-serve osdi-experiments/figure-9 (Apache-2.0)"
    ),
    "sarathi/table-2_results.csv": "microsoft/sarathi-serve osdi-experiments/table-2 (Apache-2.0)",
    "argonne/e2e_batch_latency.csv": "argonne-lcf/LLM-Inference-Bench, NVIDIA rows (BSD-3-Clause)",
    "argonne/ttft_batch16_in1024.csv": "argonne-lcf/LLM-Inference-Bench, NVIDIA rows (BSD-3-Clause)",
}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*.csv")) if path.is_dir() else [path]
    for f in files:
        h.update(f.relative_to(path.parent).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "calibration_dir",
        nargs="?",
        type=Path,
        default=REPO.parent / "shared" / "data" / "calibration",
        help="directory holding vidur/, splitwise/, sarathi/ (default: <repo>/../shared/data/calibration)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=REPO / "src" / "llmscale" / "perf" / "coefficients.json",
        help="output JSON",
    )
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args(argv)

    root: Path = args.calibration_dir
    sources = {}
    for rel, origin in SOURCES.items():
        p = root / rel
        if not p.exists():
            print(f"error: {p} not found", file=sys.stderr)
            return 2
        sources[rel] = {"origin": origin, "sha256": _sha256(p)}

    t0 = time.monotonic()
    points = load_points(root)
    print(f"{len(points)} calibration points ({sum(p.held_out for p in points)} held out)", file=sys.stderr)
    doc = build_document(points, sources, progress=lambda s: print(s, file=sys.stderr))
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
    print(f"fitted in {time.monotonic() - t0:.0f} s", file=sys.stderr)

    errs = doc["errors"]
    nan = float("nan")
    for source, e in errs["by_source"].items():
        h, f = e["held_out"], e["fit"]
        print(
            f"  {source:18s} held-out n={h['n']:5d} median {h.get('median_ape_pct', nan):6.2f}% "
            f"worst {h.get('worst_ape_pct', nan):7.2f}% | fit median {f.get('median_ape_pct', nan):6.2f}%",
            file=sys.stderr,
        )
    held = errs["overall"]["held_out"]
    print(
        f"  overall held-out median {held['median_ape_pct']}%, worst {held['worst_ape_pct']}%",
        file=sys.stderr,
    )

    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} differs from a fresh fit", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date", file=sys.stderr)
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
