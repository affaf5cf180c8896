"""The tail model's per-replica capacity against the simulator's, on many request shapes and GPUs.

For each shape (a request-length mix) and deployment, and for a fleet of ``N`` replicas behind
the least-outstanding router, it measures the largest constant Poisson rate per replica at which
the fleet keeps 99% of the *feasible* requests within the SLO (TTFT 2 s, TPOT 0.1 s), feeding it
every admitted request (infeasible ones still take engine time), and prints it beside what
:meth:`llmscale.perf.replica_tails.TailModel.capacity_rps` predicts from the shape's mean prompt
and output lengths (what the ``slo`` policy sees). The error column is model / simulator - 1:
negative means the model under-estimates what a replica holds (the policy over-provisions).

    PYTHONPATH=src .venv/bin/python benchmarks/tail_capacity.py [--shape prompt-16k] \
        [--deploy a100-8b] [-n 1 -n 6] [--model-only] [--prompt-scale 1.3]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("LLMSCALE_SHARED_DATA", REPO.parent / "shared" / "data")) / "traces"

DEPLOYMENTS = {
    "h100-8b": ("llama-3.1-8b", "h100-80gb", 1),
    "a100-8b": ("llama-3.1-8b", "a100-80gb", 1),
    "h100x4-70b": ("llama-3.1-70b", "h100-80gb", 4),
}

#: name -> (prompt mean, prompt p99, output mean, output p99), or a trace name
SHAPES: dict[str, tuple[float, float, float, float] | str] = {
    "chat": "azure",
    "code": (2000.0, 8000.0, 30.0, 150.0),
    "reasoning": (600.0, 3000.0, 2000.0, 8000.0),
    "long-context": "mooncake",
    "prompt-4k": (4000.0, 12000.0, 200.0, 800.0),
    "prompt-8k": (8000.0, 20000.0, 200.0, 800.0),
    "prompt-16k": (16000.0, 32000.0, 200.0, 800.0),
    "output-1k": (500.0, 2000.0, 1000.0, 4000.0),
    "output-4k": (500.0, 2000.0, 4000.0, 8000.0),
}
SLO_TTFT_S, SLO_TPOT_S = 2.0, 0.1


def lengths(shape: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    from llmscale.workloads.lengths import LengthSampler, LognormalLengths
    from llmscale.workloads.loaders import load_trace

    spec = SHAPES[shape]
    if isinstance(spec, str):
        path = {"azure": "azure_llm_2023_conv.csv", "mooncake": "mooncake_synthetic_trace.jsonl"}[spec]
        w = load_trace(DATA / path, spec)
        sampler = LengthSampler(w.input_tokens, w.output_tokens, source=shape)
        return sampler.sample(n, rng)
    return LognormalLengths.from_mean_p99(*spec).sample(n, rng)


def fleet_attainment(perf, sim, rate_per_replica, replicas, inp, out, infeasible, seed=0):  # type: ignore[no-untyped-def]
    """Share of feasible, admitted requests within the SLO at this Poisson rate per replica."""
    from llmscale.backtest.sizing import steady_attainment

    rng = np.random.default_rng(seed)
    total = rate_per_replica * replicas
    duration = max(300.0, 4000.0 / total)
    n = max(100, int(total * duration))
    arrivals = np.cumsum(rng.exponential(1.0 / total, n))
    pick = rng.integers(0, inp.size, n)
    slo = (SLO_TTFT_S, SLO_TPOT_S, 0.0)
    return steady_attainment(
        perf, sim, arrivals, inp[pick], out[pick], slo,
        replicas=replicas, warm_s=60.0, drain_s=300.0, exclude=infeasible[pick],
    )  # fmt: skip


def simulated_capacity(perf, sim, replicas, inp, out, infeasible, guess):  # type: ignore[no-untyped-def]
    """Largest rate per replica at >= 99% (bisection to 3%), bracketed around ``guess``."""

    def ok(r: float) -> bool:
        return fleet_attainment(perf, sim, r, replicas, inp, out, infeasible) >= 0.99

    lo, hi = guess / 1.5, guess * 1.5
    while not ok(lo):
        lo, hi = lo / 1.5, lo
        if lo < 1e-3:
            return 0.0
    while ok(hi):
        lo, hi = hi, hi * 1.5
    while hi - lo > 0.03 * hi:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def main() -> int:
    from llmscale.backtest.feasibility import infeasible_parts
    from llmscale.backtest.runner import BacktestSettings
    from llmscale.perf import get_perf_model
    from llmscale.perf.replica_tails import TailModel
    from llmscale.workloads.model import Workload

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--deploy", action="append", choices=sorted(DEPLOYMENTS))
    ap.add_argument("-n", "--replicas", action="append", type=int)
    ap.add_argument("--model-only", action="store_true", help="print the model's capacity only")
    ap.add_argument("--prompt-scale", type=float, default=1.0, help="multiply every prompt length")
    args = ap.parse_args()
    print(f"{'deploy':<11}{'shape':<13}{'N':>3}{'p mean':>8}{'o mean':>8}{'infeas.':>8}"
          f"{'model':>9}{'sim':>9}{'error':>8}{'wall':>6}")  # fmt: skip
    for deploy in args.deploy or ["h100-8b", "a100-8b"]:
        model, gpu, tp = DEPLOYMENTS[deploy]
        settings = BacktestSettings(model=model, gpu=gpu, tp=tp, slo_ttft_s=SLO_TTFT_S, slo_tpot_s=SLO_TPOT_S)
        sim = replace(settings.sim, step_noise=0.0, max_queue=None)
        perf = get_perf_model(model, gpu, tp)
        tails = TailModel(perf)
        for shape in args.shape or list(SHAPES):
            inp, out = lengths(shape, 4000, np.random.default_rng(1))
            inp = np.maximum(1, np.round(inp * args.prompt_scale)).astype(np.int64)
            w = Workload.from_arrays("s", np.arange(inp.size, dtype=np.float64), inp, out, {})
            over, slow = infeasible_parts(w, settings)
            admitted = ~over
            inp, out, slow = inp[admitted], out[admitted], slow[admitted]
            p_mean, o_mean = float(inp.mean()), float(out.mean())
            for n in args.replicas or [1, 6]:
                t0 = time.perf_counter()
                cap_model = tails.capacity_rps(p_mean, o_mean, SLO_TTFT_S, SLO_TPOT_S, replicas=n)
                cap_sim = math.nan
                if not args.model_only:
                    cap_sim = simulated_capacity(perf, sim, n, inp, out, slow, cap_model)
                err = cap_model / cap_sim - 1.0 if cap_sim > 0 else math.nan
                print(f"{deploy:<11}{shape:<13}{n:>3}{p_mean:>8.0f}{o_mean:>8.0f}{100 * slow.mean():>7.1f}%"
                      f"{cap_model:>9.3f}{cap_sim:>9.3f}{100 * err:>7.0f}%{time.perf_counter() - t0:>6.0f}",
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
