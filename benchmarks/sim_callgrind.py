"""Instructions of one `run_policy` of benchmarks/sim_speed.py, counted by callgrind (repeatable under load).

Wall-clock rates on a shared machine vary by +-5% from run to run; an instruction
count does not, so it is what decides whether a change made the simulator slower.
Runs a child Python twice under ``valgrind --tool=callgrind``: once up to the
point where sim_speed.py calls ``run_policy`` (imports, the trace, the settings),
once through it, and prints the difference. ``--src`` measures another checkout's
sources (built in place, e.g. an old commit's worktree) with this file's harness,
so both sides run the same script:

    .venv/bin/python benchmarks/sim_callgrind.py                  # this checkout
    .venv/bin/python benchmarks/sim_callgrind.py --src /work/old/src --replicas 24

The fleet is sized as sim_speed.py sizes it (from the measured sources' own
performance model) unless ``--replicas`` is given. Python compiles a module's
source at import when it has no bytecode cache (``PYTHONDONTWRITEBYTECODE=1``):
lazily imported modules then count in ``run_policy``; the line printed says
which way this run was.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "data" / "traces" / "azure_llm_2023_conv.csv"

# The child: sim_speed.py's workload and settings, then run_policy or not. Only stable APIs
# (load_trace, rate_scale, BacktestSettings.with_cold_start, run_policy) so an old checkout runs it.
_CHILD = """
import sys
from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.workloads import load_trace, rate_scale
import llmscale.sim.replica
assert llmscale.sim.replica.__file__.endswith(".so"), "the simulator is not compiled: build it in place"
trace, replicas, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
w = rate_scale(load_trace(trace, "azure"), 20.0, seed=0)
if mode == "size":
    from llmscale.backtest.runner import build_fleet
    from llmscale.backtest.sizing import replica_capacity_rps, replicas_for_rate
    base = BacktestSettings(model="llama-3-8b", gpu="h100-80gb", tp=1, min_replicas=1, max_replicas=1,
                            initial_replicas=1).with_cold_start()
    cap = replica_capacity_rps(build_fleet(w, base, 0).perf, base.sim, w.input_tokens, w.output_tokens,
                               base.slo_ttft_s, base.slo_tpot_s)
    print(replicas_for_rate(float(w.summary()["peak_1min_rps"]), cap))
    sys.exit(0)
s = BacktestSettings(model="llama-3-8b", gpu="h100-80gb", tp=1, min_replicas=replicas,
                     max_replicas=replicas, initial_replicas=replicas,
                     policy_params={"static": {"replicas": replicas}}).with_cold_start()
if mode == "run":
    r = run_policy(w, "static", s)
    print(replicas, w.num_requests, r.summary["slo_attainment"])
else:
    print(replicas, w.num_requests)
"""


def _child(src: Path, trace: Path, replicas: int, mode: str, valgrind: list[str]) -> str:
    cmd = [*valgrind, sys.executable, "-c", _CHILD, str(trace), str(replicas), mode]
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.strip()


def _instructions(src: Path, trace: Path, replicas: int, mode: str, out_dir: Path) -> tuple[int, str]:
    out = out_dir / f"callgrind.{mode}.out"
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    stdout = _child(src, trace, replicas, mode, valgrind)
    m = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    if m is None:
        raise RuntimeError(f"no instruction total in {out}")
    return int(m.group(1)), stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, default=REPO / "src", help="the llmscale sources to measure")
    ap.add_argument("--replicas", type=int, default=0, help="fleet size (default: as sim_speed.py)")
    ap.add_argument("--trace", type=Path, default=TRACE)
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"needs {args.trace} (../shared/data beside the checkout, or --trace)", file=sys.stderr)
        return 2
    # Sized in a process of its own: sizing builds a fleet, which would warm what run_policy pays.
    replicas = args.replicas or int(_child(args.src, args.trace, 0, "size", []))
    with tempfile.TemporaryDirectory() as tmp:
        run, line = _instructions(args.src, args.trace, replicas, "run", Path(tmp))
        base, _ = _instructions(args.src, args.trace, replicas, "base", Path(tmp))
    cached = "no bytecode cache" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode cache allowed"
    print(
        f"{args.src}: run_policy {(run - base) / 1e9:.3f}e9 instructions "
        f"(whole run {run / 1e9:.3f}e9, without run_policy {base / 1e9:.3f}e9); "
        f"{replicas} replicas, [requests, SLO attainment] {line.split()[1:]}; {cached}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
