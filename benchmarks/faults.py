"""Fault injection (seed 004 4.4) on the default hour: bursts, HBM glitches, and the adaptive batch fuse.

Runs ``llmscale backtest`` (a subprocess per scenario, as a user runs it; same seed, so every
scenario is sized and replayed alike) on the ``default`` preset for a few policies, and prints
SLO attainment, GPU-hours and the P99 of TTFT and TPOT per scenario and policy:

- **healthy**: the preset as it is;
- **bursts**: ``--burst-share 0.75``: three quarters of the requests regrouped into 50 ms bursts,
  one a second at Poisson times (workloads.entropy_bursts);
- **glitch**: ``--hbm-glitch 1200:600:0.5``: from minute 20 to 30, the older half of the replicas
  keep 8/128 of their HBM bandwidth for 14 ms of every 83 ms (sim/faults.py);
- **bursts+glitch**: both;

each without and with ``--adaptive-batch`` (the fuse: max_num_seqs halves after more than 3
glitched periods, down to 32, and doubles back after 4 healthy ones). The fuse acts only on
glitches, so its rows without a glitch repeat the rows without it: a check, not a finding.

    python benchmarks/faults.py                       # 8 scenarios x 3 policies, ~1-3 min on 2 cores
    python benchmarks/faults.py --policies slo --scenarios healthy,glitch
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GLITCH = "1200:600:0.5"
SCENARIOS: dict[str, list[str]] = {
    "healthy": [],
    "bursts": ["--burst-share", "0.75"],
    "glitch": ["--hbm-glitch", GLITCH],
    "bursts+glitch": ["--burst-share", "0.75", "--hbm-glitch", GLITCH],
}
POLICIES = "slo,static,bandwidth-entropy"
#: one scenario's backtest may take this long before the benchmark gives up on it
RUN_TIMEOUT_S = 600.0


def llmscale() -> list[str]:
    script = Path(sys.executable).with_name("llmscale")
    return [str(script)] if script.exists() else [sys.executable, "-m", "llmscale.cli"]


def run(extra: list[str], policies: str, seed: int) -> dict[str, Any]:
    cmd = [
        *llmscale(),
        "backtest",
        "--workload",
        "default",
        "--policy",
        policies,
        "--no-oracle",
        "--seed",
        str(seed),
        "--json",
        "-",
        *extra,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT, check=False)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(p.stdout)
    return doc


def table(rows: list[tuple[str, str, dict[str, Any]]]) -> str:
    """One line per (scenario, fuse, policy): attainment, GPU-hours, TTFT and TPOT P99."""
    head = (
        f"{'scenario':<14} {'fuse':<4} {'policy':<18} {'SLO attain.':>11} {'GPU-h':>7} "
        f"{'TTFT p99 s':>10} {'TPOT p99 s':>10}"
    )
    lines = [head, "-" * len(head)]
    for scenario, fuse, r in rows:
        lines.append(
            f"{scenario:<14} {fuse:<4} {r['policy']:<18} {100 * r['slo_attainment']:>10.2f}% "
            f"{r['gpu_hours']:>7.2f} {r['ttft_p99_s']:>10.3g} {r['tpot_p99_s']:>10.4f}"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    names = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    os.environ.setdefault("COLUMNS", "200")
    rows: list[tuple[str, str, dict[str, Any]]] = []
    t0 = time.perf_counter()
    for name in names:
        for fuse in (False, True):
            t1 = time.perf_counter()
            doc = run(SCENARIOS[name] + (["--adaptive-batch"] if fuse else []), args.policies, args.seed)
            print(
                f"[{name}{' +fuse' if fuse else ''}: {doc['workload']['requests']:,} requests, "
                f"{time.perf_counter() - t1:.1f} s]",
                file=sys.stderr,
                flush=True,
            )
            rows.extend((name, "on" if fuse else "off", r) for r in doc["results"])
    print(table(rows))
    print(f"\n{len(rows)} runs in {time.perf_counter() - t0:.0f} s (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
