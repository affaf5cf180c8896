"""What one replica holds: llmscale's capacity model (both modes) against the simulator, per request mix.

For each mix, requests are sampled (``--requests``, seeded), those longer than the context or
whose prefill alone on an idle replica misses the TTFT target are left out (no fleet serves
them), and three numbers of one replica are printed in req/s:

* ``probe`` — the simulator itself (:func:`llmscale.backtest.sizing.replica_capacity_rps`): the
  highest Poisson rate at which one simulated replica keeps 99% of the requests within the SLO;
* ``tail`` — :func:`llmscale.perf.replica_tails.replica_capacity` in mode ``"tail"`` at the
  sample's mean lengths (what ``slo`` plans with: it sees only the means, and assumes CVs of 1),
  and ``tail@cv`` the same model told the sample's own CVs (how much of its error is that
  assumption);
* ``mean`` — mode ``"mean"`` (mean ITL within the TPOT: what ``capacity-calibrated`` plans with).

Mixes: ``chat`` (Azure conversation trace pairs), ``code`` (lognormal 2,000 / 30 tokens),
``reasoning`` (600 / 2,000), ``long-context`` (Mooncake pairs; on a 128k-context model) from
:mod:`llmscale.workloads.matrix`, and ``default-preset`` (the default workload's lengths).
Needs the shared traces (``../shared/data/traces``) for chat and long-context. A few seconds
with the compiled simulator; under a minute in pure Python.

    .venv/bin/python benchmarks/capacity_models.py [--model llama-3-8b] [--requests 4000]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
#: the shared traces: ../shared/data beside the checkout, or $LLMSCALE_SHARED_DATA (a worktree elsewhere)
DATA = Path(os.environ.get("LLMSCALE_SHARED_DATA", REPO.parent / "shared" / "data")) / "traces"
GPU = "h100-80gb"
SLO_TTFT_S, SLO_TPOT_S = 2.0, 0.1
#: the model a mix runs on by default: Mooncake's prompts (mean ~9k, up to 120k tokens) need a
#: 128k context, and Llama-3-8B's 8,192 would reject half of them
MIX_MODEL = {"long-context": "llama-3.1-8b"}


def _lengths(mix: str):  # type: ignore[no-untyped-def]
    from llmscale.workloads.lengths import DEFAULT_LENGTHS
    from llmscale.workloads.matrix import mix_lengths

    return DEFAULT_LENGTHS if mix == "default-preset" else mix_lengths(mix, DATA)


def row(mix: str, model: str, requests: int, seed: int) -> dict[str, float]:
    from llmscale.backtest.feasibility import idle_ttft_s
    from llmscale.backtest.sizing import replica_capacity_rps as probe
    from llmscale.perf import get_perf_model
    from llmscale.perf.replica_tails import TailModel, replica_capacity
    from llmscale.sim.config import SimConfig
    from llmscale.slo import ttft_within

    perf = get_perf_model(model, GPU, 1)
    sim = SimConfig()
    inp, out = _lengths(mix).sample(requests, np.random.default_rng(seed))
    inp, out = np.asarray(inp, dtype=np.int64), np.asarray(out, dtype=np.int64)
    keep = inp + out <= perf.model.max_context_tokens
    keep[keep] = ttft_within(idle_ttft_s(perf, sim, inp[keep]), SLO_TTFT_S)
    inp, out = inp[keep], out[keep]
    p, o = float(inp.mean()), float(out.mean())
    t0 = time.perf_counter()
    measured = probe(perf, sim, inp, out, SLO_TTFT_S, SLO_TPOT_S, seed=seed)
    probe_s = time.perf_counter() - t0
    cap = {m: replica_capacity(model, GPU, 1, p, o, SLO_TTFT_S, SLO_TPOT_S, mode=m) for m in ("tail", "mean")}
    at_cv = TailModel(perf).capacity_rps(
        p, o, SLO_TTFT_S, SLO_TPOT_S, prompt_cv=float(inp.std() / p), output_cv=float(out.std() / o)
    )
    return {
        "prompt": p,
        "prompt_cv": float(inp.std() / p),
        "output": o,
        "output_cv": float(out.std() / o),
        "kept": float(keep.mean()),
        "probe": measured,
        "probe_s": probe_s,
        "tail": cap["tail"].rate_rps,
        "tail_cv": at_cv,
        "mean": cap["mean"].rate_rps,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3-8b", help="model of every mix but long-context")
    ap.add_argument(
        "--mixes", default="chat,code,reasoning,long-context,default-preset", help="comma-separated"
    )
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"one replica, {GPU}, SLO TTFT {SLO_TTFT_S} s / TPOT {SLO_TPOT_S} s; req/s (x the probe)")
    head = f"{'mix':15s} {'model':13s} {'prompt (cv)':>14s} {'output (cv)':>13s} {'kept':>6s} {'probe':>7s}"
    print(f"{head} {'tail':>13s} {'tail@cv':>13s} {'mean':>13s}")
    for mix in args.mixes.split(","):
        model = MIX_MODEL.get(mix, args.model)
        r = row(mix, model, args.requests, args.seed)

        def ratio(k: str, r: dict[str, float] = r) -> str:
            return f"{r[k]:6.2f} ({r[k] / r['probe']:.2f}x)"

        print(
            f"{mix:15s} {model:13s} {r['prompt']:7.0f} ({r['prompt_cv']:.2f}) {r['output']:6.0f} "
            f"({r['output_cv']:.2f}) {r['kept']:6.3f} {r['probe']:7.2f} {ratio('tail')} "
            f"{ratio('tail_cv')} {ratio('mean')}",
            flush=True,
        )


if __name__ == "__main__":
    main()
