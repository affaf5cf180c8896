"""Does ``llmscale tune`` find parameters that beat ``slo``'s defaults on traffic it did not see?

The Azure LLM conversation trace (58 minutes, 19,366 requests; ``../shared/data``) at
``--rate-scale`` (10: ~55 req/s, 5-8 H100 replicas of Llama-3-8B, SLO 2 s / 0.1 s) is cut into
two windows: the study tunes ``slo`` on the first (``--train``, minutes 0-25), for the fewest
GPU-hours at >= 99% SLO attainment; then the defaults and the tuned parameters are backtested
on the second (``--test``, minutes 30-58), which no trial saw. Each window gets its own bounds
and initial fleet, sized as the policy benchmark sizes them (``benchmarks/policies.py``).

    .venv/bin/python benchmarks/tune_heldout.py [--trials 24] [--jobs 2] [--rate-scale 10]

It prints one row per (window, configuration): GPU-hours, SLO attainment, and the tuned
parameters. Bounded: ~1-2 s a trial with the compiled simulator, ~6 s with its sources
(``LLMSCALE_PURE_PYTHON=1``), so 24 trials on 2 processes take 1-3 minutes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from policies import settings_for  # the policy benchmark's sizing

REPO = Path(__file__).resolve().parents[1]
TRACE = "traces/azure_llm_2023_conv.csv"


def _window(text: str) -> tuple[float, float]:
    start, _, duration = text.partition(":")
    return float(start), float(duration)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data", type=Path, default=REPO.parent / "shared" / "data", help="the shared data folder"
    )
    ap.add_argument("--rate-scale", type=float, default=10.0)
    ap.add_argument("--train", type=_window, default=(0.0, 1500.0), help="START:DURATION s to tune on")
    ap.add_argument("--test", type=_window, default=(1800.0, 1800.0), help="START:DURATION s to check on")
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.99)
    args = ap.parse_args()

    from llmscale.policies.base import POLICIES, policy_names
    from llmscale.tune import (
        TuneCase,
        TuneSpec,
        evaluate,
        make_executor,
        run_study,
        search_space,
        storage_url,
    )
    from llmscale.workloads import load_trace, rate_scale, window

    path = args.data / TRACE
    if not path.is_file():
        print(f"{path} not found: this benchmark replays the shared Azure trace", file=sys.stderr)
        return 2
    full = load_trace(path, "azure", seed=0)
    cases = {}
    for name, (start, duration) in (("train", args.train), ("test", args.test)):
        w = rate_scale(window(full, start, duration), args.rate_scale, seed=args.seed)
        settings, _cap, _peak = settings_for(w)
        label = f"azure conv x{args.rate_scale:g} [{start:.0f} s, {start + duration:.0f} s)"
        cases[name] = TuneCase(label, w, settings)
    policy_names()
    space = search_space(POLICIES["slo"])
    wall0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        spec = TuneSpec(
            policy="slo",
            target_attainment=args.target,
            trials=args.trials,
            storage=storage_url(str(Path(tmp) / "study.db")),
            study_name="slo-heldout",
            seed=args.seed,
        )
        train = [cases["train"]]
        result = run_study(
            spec, space, train, lambda: make_executor("slo", train, jobs=args.jobs, ray_address=None)
        )
    tune_s = time.perf_counter() - wall0
    best, base = result.best, result.baseline
    assert base is not None
    print(f"tuned slo on {cases['train'].label}: {len(result.trials)} trials in {tune_s:.0f} s")
    print(f"{'window':<44} {'config':<9} {'GPU-hours':>10} {'attainment':>11}")
    print(f"{cases['train'].label:<44} {'defaults':<9} {base.gpu_hours:>10.4f} {base.attainment:>11.4%}")
    if best is None:
        print(f"no trial reached {args.target:.2%} on the training window")
        return 1
    print(f"{cases['train'].label:<44} {'tuned':<9} {best.gpu_hours:>10.4f} {best.attainment:>11.4%}")
    test = [cases["test"]]
    held = {
        name: evaluate("slo", params, test) for name, params in (("defaults", {}), ("tuned", best.params))
    }
    for name, outcome in held.items():
        print(f"{cases['test'].label:<44} {name:<9} {outcome.gpu_hours:>10.4f} {outcome.attainment:>11.4%}")
    print(
        "tuned: "
        + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in best.params.items())
    )
    d, t = held["defaults"], held["tuned"]
    verdict = t.attainment >= args.target and t.gpu_hours < d.gpu_hours
    print(
        f"held out: tuned {t.gpu_hours / d.gpu_hours:.3f}x the defaults' GPU-hours at {t.attainment:.3%} "
        f"(defaults {d.attainment:.3%}): {'better' if verdict else 'NOT better'} at >= {args.target:.0%}"
    )
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
