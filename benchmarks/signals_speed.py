#!/usr/bin/env python3
"""compute_signals over 500 replicas x 20 observations, against a reference run in this process.

Usage::

    .venv/bin/python benchmarks/signals_speed.py [--replicas 500] [--observations 20]

The live controller's tick budget is 1 s and the target for the signals is < 100 ms on a current
laptop core. Machines differ, so the time is printed beside ``sum(range(10**6))`` measured in the
same process (~20 ms on such a core) and as a ratio to it; the target is a ratio under 5. Measured
(2 shared cores, reference 76 ms): ~80 ms at a 15 s tick, ~130 ms when all 20 observations fall
in the 60 s windows (1 s tick), i.e. ~1.1x and ~1.7x the reference. This is a benchmark, not a
test: a timing on a loaded machine says nothing about the code (tests/signals checks the values).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests" / "signals"))

from signals_fixtures import synthetic_fleet  # noqa: E402

from llmscale.signals import compute_signals  # noqa: E402


def _best_cpu_s(f: object, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        f()  # type: ignore[operator]
        best = min(best, time.process_time() - t0)
    return best


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=500)
    ap.add_argument("--observations", type=int, default=20)
    args = ap.parse_args(argv)
    ref = _best_cpu_s(lambda: sum(range(10**6)))
    print(f"reference sum(range(10**6)): {ref * 1e3:.1f} ms CPU")
    worst = 0.0
    for tick_s in (15.0, 1.0):
        window = synthetic_fleet(replicas=args.replicas, observations=args.observations, tick_s=tick_s)
        took = _best_cpu_s(lambda w=window: dict(compute_signals(w).values.items()))
        worst = max(worst, took / ref)
        print(
            f"{args.replicas} x {args.observations} at a {tick_s:.0f} s tick: {took * 1e3:.1f} ms CPU "
            f"= {took / ref:.2f}x the reference"
        )
    print(f"target: < 5x the reference: {'PASS' if worst < 5.0 else 'MISS'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
