"""The tail model's per-replica capacity against the simulator's, on many request shapes and GPUs.

For each shape (a request-length mix) and deployment, and for a fleet of ``N`` replicas behind
the least-outstanding router, it measures the largest constant Poisson rate per replica at which
the fleet keeps 99% of the *feasible* requests within the SLO (TTFT 2 s, TPOT 0.1 s), feeding it
every admitted request (infeasible ones still take engine time), and prints it beside what
:meth:`llmscale.perf.replica_tails.TailModel.capacity_rps` predicts from the shape's mean prompt
and output lengths (what the ``slo`` policy sees). The error column is model / simulator - 1:
negative means the model under-estimates what a replica holds (the policy over-provisions).

The model is asked what the ``slo`` policy asks it: the mean prompt and output lengths, their
CVs (the policy reads them from ``vllm:request_prompt_tokens`` and
``vllm:request_generation_tokens``; the output CV sets the in-flight context,
``docs/tail-model.md``) and the arrivals' index of dispersion (the policy
reads it from per-tick arrival counts). ``--bursty D`` feeds the fleet batch-Poisson arrivals
instead: batches of geometric size with E[X^2] / E[X] = D at Poisson times, each batch within
``BURST_SPAN_S``; the model is told D.

``--acceptance`` runs the issue's table: Poisson, bursty, long-prompt and long-output shapes on
three deployments, four replicas each, and prints model / simulator per cell (within 10% is the
target).

    PYTHONPATH=src .venv/bin/python benchmarks/tail_capacity.py [--shape prompt-16k] \
        [--deploy a100-8b] [-n 1 -n 6] [--model-only] [--prompt-scale 1.3] [--bursty 9]
    PYTHONPATH=src .venv/bin/python benchmarks/tail_capacity.py --acceptance
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
    "h200x4-70b": ("llama-3-70b", "h200", 4),
}

#: a burst's requests arrive within this span (well inside the TTFT target of 2 s)
BURST_SPAN_S = 0.2

#: the issue's acceptance table: (label, shape, index of dispersion) on each deployment
ACCEPTANCE_SHAPES: tuple[tuple[str, str, float], ...] = (
    ("poisson", "chat", 1.0),
    ("bursty", "chat", 9.0),
    ("long-prompt", "prompt-8k", 1.0),
    ("long-output", "output-1k", 1.0),
)
ACCEPTANCE_DEPLOYMENTS = ("h100-8b", "a100-8b", "h200x4-70b")

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


def arrival_times(total_rps: float, n: int, dispersion: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` arrival times at ``total_rps``: Poisson (``dispersion`` 1), or batches at Poisson times
    of a geometric size X >= 1 with mean m = (D + 1) / 2 (E[X^2] / E[X] = 2m - 1 = D), each batch
    spread uniformly over :data:`BURST_SPAN_S`."""
    if dispersion <= 1.0:
        return np.cumsum(rng.exponential(1.0 / total_rps, n))
    m = (dispersion + 1.0) / 2.0
    sizes = rng.geometric(1.0 / m, int(2 * n / m) + 10)
    starts = np.cumsum(rng.exponential(m / total_rps, sizes.size))
    times = np.repeat(starts, sizes) + rng.uniform(0.0, BURST_SPAN_S, int(sizes.sum()))
    return np.sort(times[:n]) if times.size >= n else np.sort(times)


def fleet_attainment(perf, sim, rate_per_replica, replicas, inp, out, infeasible, seed=0, dispersion=1.0):  # type: ignore[no-untyped-def]
    """Share of feasible, admitted requests within the SLO at this rate per replica."""
    from llmscale.backtest.sizing import steady_attainment

    rng = np.random.default_rng(seed)
    total = rate_per_replica * replicas
    duration = max(300.0, 4000.0 / total)
    n = max(100, int(total * duration))
    arrivals = arrival_times(total, n, dispersion, rng)
    n = arrivals.size
    pick = rng.integers(0, inp.size, n)
    slo = (SLO_TTFT_S, SLO_TPOT_S, 0.0)
    return steady_attainment(
        perf, sim, arrivals, inp[pick], out[pick], slo,
        replicas=replicas, warm_s=60.0, drain_s=300.0, exclude=infeasible[pick],
    )  # fmt: skip


def simulated_capacity(perf, sim, replicas, inp, out, infeasible, guess, dispersion=1.0):  # type: ignore[no-untyped-def]
    """Largest rate per replica at >= 99% (bisection to 3%), bracketed around ``guess``."""

    def ok(r: float) -> bool:
        return fleet_attainment(perf, sim, r, replicas, inp, out, infeasible, dispersion=dispersion) >= 0.99

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


def cell(deploy: str, shape: str, replicas: int, *, dispersion: float = 1.0, prompt_scale: float = 1.0,
         samples: int = 4000, model_only: bool = False) -> dict[str, float]:  # fmt: skip
    """One deployment x shape x fleet size: the model's capacity per replica (asked as ``slo`` asks
    it) and the simulator's, with the shape's numbers. The benchmark's core (the test runs it small)."""
    from llmscale.backtest.feasibility import infeasible_parts
    from llmscale.backtest.runner import BacktestSettings
    from llmscale.perf import get_perf_model
    from llmscale.perf.replica_tails import TailModel
    from llmscale.workloads.model import Workload

    model, gpu, tp = DEPLOYMENTS[deploy]
    settings = BacktestSettings(model=model, gpu=gpu, tp=tp, slo_ttft_s=SLO_TTFT_S, slo_tpot_s=SLO_TPOT_S)
    sim = replace(settings.sim, step_noise=0.0, max_queue=None)
    perf = get_perf_model(model, gpu, tp)
    tails = TailModel(perf)
    inp, out = lengths(shape, samples, np.random.default_rng(1))
    inp = np.maximum(1, np.round(inp * prompt_scale)).astype(np.int64)
    w = Workload.from_arrays("s", np.arange(inp.size, dtype=np.float64), inp, out, {})
    over, slow = infeasible_parts(w, settings)
    admitted = ~over
    inp, out, slow = inp[admitted], out[admitted], slow[admitted]
    p_mean, o_mean = float(inp.mean()), float(out.mean())
    o_cv = float(out.std() / o_mean)
    p_cv = float(inp.std() / p_mean)
    cap_model = tails.capacity_rps(p_mean, o_mean, SLO_TTFT_S, SLO_TPOT_S, replicas=replicas,
                                   prompt_cv=p_cv, output_cv=o_cv, dispersion=dispersion)  # fmt: skip
    cap_sim = math.nan
    if not model_only:
        cap_sim = simulated_capacity(perf, sim, replicas, inp, out, slow, cap_model, dispersion)
    return {
        "prompt_mean": p_mean,
        "output_mean": o_mean,
        "output_cv": o_cv,
        "prompt_cv": p_cv,
        "infeasible": float(slow.mean()),
        "model_rps": cap_model,
        "sim_rps": cap_sim,
        "ratio": cap_model / cap_sim if cap_sim > 0 else math.nan,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--deploy", action="append", choices=sorted(DEPLOYMENTS))
    ap.add_argument("-n", "--replicas", action="append", type=int)
    ap.add_argument("--model-only", action="store_true", help="print the model's capacity only")
    ap.add_argument("--prompt-scale", type=float, default=1.0, help="multiply every prompt length")
    ap.add_argument("--bursty", type=float, default=1.0, help="arrivals' index of dispersion (1: Poisson)")
    ap.add_argument("--acceptance", action="store_true", help="the issue's table (module docstring)")
    args = ap.parse_args()
    print(f"{'deploy':<11}{'shape':<13}{'D':>4}{'N':>3}{'p mean':>8}{'p cv':>6}{'o mean':>8}{'o cv':>6}"
          f"{'infeas.':>8}{'model':>9}{'sim':>9}{'ratio':>7}{'wall':>6}")  # fmt: skip
    if args.acceptance:
        runs = [
            (d, label, shape, disp)
            for d in ACCEPTANCE_DEPLOYMENTS
            for label, shape, disp in ACCEPTANCE_SHAPES
        ]
        sizes = args.replicas or [4]
    else:
        runs = [
            (d, s, s, args.bursty)
            for d in args.deploy or ["h100-8b", "a100-8b"]
            for s in args.shape or list(SHAPES)
        ]
        sizes = args.replicas or [1, 6]
    ratios = []
    for deploy, label, shape, disp in runs:
        for n in sizes:
            t0 = time.perf_counter()
            r = cell(
                deploy, shape, n, dispersion=disp, prompt_scale=args.prompt_scale, model_only=args.model_only
            )
            ratios.append(r["ratio"])
            print(f"{deploy:<11}{label:<13}{disp:>4.0f}{n:>3}"
                  f"{r['prompt_mean']:>8.0f}{r['prompt_cv']:>6.2f}{r['output_mean']:>8.0f}"
                  f"{r['output_cv']:>6.2f}{100 * r['infeasible']:>7.1f}%"
                  f"{r['model_rps']:>9.3f}{r['sim_rps']:>9.3f}{r['ratio']:>7.2f}"
                  f"{time.perf_counter() - t0:>6.0f}", flush=True)  # fmt: skip
    known = [x for x in ratios if not math.isnan(x)]
    if known:
        within = sum(1 for x in known if abs(x - 1.0) <= 0.10)
        print(f"within 10%: {within} of {len(known)} cells; ratio range {min(known):.2f}-{max(known):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
