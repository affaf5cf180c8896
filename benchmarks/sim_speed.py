"""Simulator speed: the Azure conversation trace at --rate-scale 20 on a static fleet that holds the SLO.

Prints simulated requests per wall-second (median of 3 runs, each in a fresh
process so peak memory is the run's own) and the peak resident memory; then,
in this process, the same simulator stepping one decode token at a time
(``max_jump_steps=1``) on a 10-minute window against closed-form jumps on the
same window, as a ratio; and that window once more in two fresh processes,
the mypyc-compiled simulator against its plain sources (LLMSCALE_PURE_PYTHON=1).
Target: >= 50,000 requests/s and < 1 GB.

    .venv/bin/python benchmarks/sim_speed.py [--runs 3] [--rate-scale 20]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "data" / "traces" / "azure_llm_2023_conv.csv"


def _settings(replicas: int, **sim_overrides: object):  # type: ignore[no-untyped-def]
    from llmscale.backtest.runner import BacktestSettings

    s = BacktestSettings(
        model="llama-3-8b",
        gpu="h100-80gb",
        tp=1,
        min_replicas=replicas,
        max_replicas=replicas,
        initial_replicas=replicas,
        policy_params={"static": {"replicas": replicas}},
    ).with_cold_start()
    return replace(s, sim=replace(s.sim, **sim_overrides)) if sim_overrides else s


def _workload(rate_scale: float):  # type: ignore[no-untyped-def]
    from llmscale.workloads import load_trace
    from llmscale.workloads import rate_scale as scale

    return scale(load_trace(TRACE, "azure"), rate_scale, seed=0)


def _one_run(rate_scale: float, replicas: int, out: mp.Queue[str]) -> None:
    from llmscale.backtest.runner import run_policy

    w = _workload(rate_scale)
    t0 = time.perf_counter()
    r = run_policy(w, "static", _settings(replicas))
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    out.put(
        json.dumps(
            {
                "requests": w.num_requests,
                "wall_s": wall,
                "peak_mb": peak_mb,
                "slo_attainment": r.summary["slo_attainment"],
            }
        )
    )


def _window_run(rate_scale: float, replicas: int, out: mp.Queue[str]) -> None:
    """The 10-minute window in a fresh process: compiled or source simulator, per its environment."""
    import llmscale.sim.replica
    from llmscale.backtest.runner import run_policy
    from llmscale.workloads import window

    win = window(_workload(rate_scale), 600.0, 600.0)
    t0 = time.perf_counter()
    run_policy(win, "static", _settings(replicas))
    wall = time.perf_counter() - t0
    out.put(json.dumps({"wall_s": wall, "module": Path(str(llmscale.sim.replica.__file__)).name}))


def _compiled_vs_source(ctx: Any, rate_scale: float, replicas: int) -> None:
    """Same machine, same moment: the mypyc build against the plain sources (LLMSCALE_PURE_PYTHON=1)."""
    walls = {}
    for label, pure in (("compiled", "0"), ("source", "1")):
        old = os.environ.get("LLMSCALE_PURE_PYTHON")
        os.environ["LLMSCALE_PURE_PYTHON"] = pure  # read by the child when it first imports llmscale.sim
        try:
            q: mp.Queue[str] = ctx.Queue()
            p = ctx.Process(target=_window_run, args=(rate_scale, replicas, q))
            p.start()
            row = json.loads(q.get())
            p.join()
        finally:
            if old is None:
                os.environ.pop("LLMSCALE_PURE_PYTHON", None)
            else:
                os.environ["LLMSCALE_PURE_PYTHON"] = old
        walls[label] = row["wall_s"]
        print(f"  {label:8s} ({row['module']}): {row['wall_s']:.2f} s")
    ratio = walls["source"] / walls["compiled"]
    print(f"10-minute window: the compiled simulator is {ratio:.2f}x the sources")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate-scale", type=float, default=20.0)
    args = ap.parse_args()
    if not TRACE.exists():
        print(f"needs {TRACE} (../shared/data beside the checkout)", file=sys.stderr)
        return 2

    from llmscale.backtest.runner import build_fleet, run_policy
    from llmscale.backtest.sizing import replica_capacity_rps, replicas_for_rate
    from llmscale.workloads import window

    w = _workload(args.rate_scale)
    base = _settings(1)
    perf = build_fleet(w, base, 0).perf
    cap = replica_capacity_rps(
        perf, base.sim, w.input_tokens, w.output_tokens, base.slo_ttft_s, base.slo_tpot_s
    )
    replicas = replicas_for_rate(float(w.summary()["peak_1min_rps"]), cap)
    print(
        f"workload: {w.num_requests:,} requests over {w.duration_s:,.0f} s "
        f"(mean {w.num_requests / w.duration_s:.1f} req/s); "
        f"one replica ~{cap:.2f} req/s -> static fleet of {replicas}"
    )

    ctx = mp.get_context("spawn")
    rows = []
    for i in range(args.runs):
        q: mp.Queue[str] = ctx.Queue()
        p = ctx.Process(target=_one_run, args=(args.rate_scale, replicas, q))
        p.start()
        row = json.loads(q.get())
        p.join()
        rows.append(row)
        print(
            f"run {i + 1}: {row['requests'] / row['wall_s']:,.0f} req/s  wall {row['wall_s']:.2f} s  "
            f"peak {row['peak_mb']:.0f} MB  SLO attainment {row['slo_attainment']:.4f}"
        )
    # This machine's speed varies a lot with what else runs on it: print a fixed pure-Python
    # reference so numbers from different runs can be compared.
    t0 = time.perf_counter()
    sum(range(10**7))
    ref_s = time.perf_counter() - t0
    print(f"machine reference: sum(range(10**7)) took {ref_s:.3f} s (a quiet modern core: ~0.2 s)")
    rate = statistics.median(r["requests"] / r["wall_s"] for r in rows)
    peak = max(r["peak_mb"] for r in rows)
    print(
        f"median: {rate:,.0f} simulated requests per wall-second; peak memory {peak:.0f} MB "
        f"(target >= 50,000 req/s, < 1024 MB)"
    )

    # Same process, same window: closed-form jumps vs stepping every decode token.
    win = window(w, 600.0, 600.0)
    timings = {}
    for label, cap_steps in (("jumps", None), ("token-by-token", 1)):
        t0 = time.perf_counter()
        run_policy(win, "static", _settings(replicas, max_jump_steps=cap_steps))
        timings[label] = time.perf_counter() - t0
    print(
        f"10-minute window ({win.num_requests:,} requests): jumps {timings['jumps']:.2f} s, "
        f"token-by-token {timings['token-by-token']:.2f} s -> jumps are "
        f"{timings['token-by-token'] / timings['jumps']:.1f}x faster"
    )
    _compiled_vs_source(ctx, args.rate_scale, replicas)
    return 0


if __name__ == "__main__":
    sys.exit(main())
