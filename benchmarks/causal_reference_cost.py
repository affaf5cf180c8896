"""What the causal reference adds to the default backtest's wall time, as a ratio.

Runs ``llmscale backtest`` on the embedded default hour (every default policy and the oracle)
in this process, with ``--no-causal-reference`` (the baseline) and with the reference on, and
prints each run's wall time and the ratio reference / baseline. ``--serial`` also runs the
reference the way it ran before its forked runs (every run after the last, in the oracle's job)
for the ratio it bought. Issue 20 asks for <= 1.3x with the default ``--jobs`` on 2 cores. Every
variant writes the same reference row (``tests/backtest/test_causal_reference_parallel.py``);
the benchmark checks that too, but for wall times.

    PYTHONPATH=src python benchmarks/causal_reference_cost.py [--jobs 2] [--repeat 1] [--serial] \\
        [--duration-s 3600]

The machine is shared: the wall times are only comparable run against run in one invocation,
and only on a machine whose load (``uptime``) stays below its core count meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import llmscale.backtest.compare as compare
from llmscale.cli import app

#: the function the backtest's oracle job calls for the reference (``--serial`` wraps it)
_HOOK = "run_causal_reference"


def _backtest(args: list[str], out: Path) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    app(args=["backtest", "--json", str(out), *args], standalone_mode=False)
    wall_s = time.perf_counter() - t0
    doc: dict[str, Any] = json.loads(out.read_text())
    return wall_s, doc


def _reference_row(doc: dict[str, Any]) -> str:
    row = dict(doc["causal_reference"])
    row.pop("wall_s", None)
    return json.dumps(row, sort_keys=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=0, help="as the CLI's --jobs (0: the CPU count)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each variant, interleaved")
    ap.add_argument("--serial", action="store_true", help="also the reference run serially (before)")
    ap.add_argument("--duration-s", type=float, default=None, help="a shorter window of the default hour")
    opts = ap.parse_args()
    common = ["--jobs", str(opts.jobs)]
    if opts.duration_s is not None:
        common += ["--workload", "default", "--duration-s", str(opts.duration_s)]
    forked = getattr(compare, _HOOK)

    def serial(*args: Any, **kwargs: Any) -> Any:
        kwargs["spare_workers"] = None  # every run in the oracle's job, one after another
        return forked(*args, **kwargs)

    variants: list[tuple[str, list[str], Any]] = [
        ("no reference", ["--no-causal-reference"], forked),
        ("reference", [], forked),
    ]
    if opts.serial:
        variants.append(("reference, serial", [], serial))
    walls: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    rows: set[str] = set()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(opts.repeat):
            for name, extra, fn in variants:
                setattr(compare, _HOOK, fn)
                try:
                    wall_s, doc = _backtest([*common, *extra], Path(tmp) / "run.json")
                finally:
                    setattr(compare, _HOOK, forked)
                walls[name].append(wall_s)
                line = f"#{r + 1} {name:<18} {wall_s:8.1f} s"
                if doc.get("causal_reference"):
                    rows.add(_reference_row(doc))
                    ref = doc["causal_reference"]
                    line += f"   (reference: {ref['reference_search']['runs']} runs, {ref['wall_s']:.1f} s)"
                print(line, file=sys.stderr)
    print(f"load average after: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    base = min(walls["no reference"])
    for name, _, _ in variants[1:]:
        print(f"{name}: {min(walls[name]) / base:.2f}x the run without it (best of {opts.repeat})")
    if len(rows) > 1:
        sys.exit("the reference's row differs between the variants")


if __name__ == "__main__":
    main()
