"""Every policy against the oracle on two real load shapes: SLO attainment vs GPU-hours.

Traces (Llama-3-8B on H100, SLO TTFT <= 2 s and TPOT <= 0.1 s):

- ``azure-x20``: the Azure LLM conversation trace at --rate-scale 20 (~387,000 requests, 58 min);
- ``servegen-ramp``: two hours of the ServeGen m-large total-rate curve from hour 21 of day 1,
  which holds the day's ramp to its peak (151 -> 583 req/s), rate-scaled by 0.3 so the fleet
  needs about 5 to 20 replicas.

For each trace it prints every policy's attainment, GPU-hours and GPU-hours relative to the
oracle, and checks the acceptance of the policy issue: ``slo`` reaches >= 99% attainment at
<= 1.3x the oracle's GPU-hours and no other policy has both higher attainment and fewer
GPU-hours. Policies run in parallel processes (--jobs).

ServeGen traces are generated with ``--rate-shape`` (default ``smooth``: the rate is continuous,
each 10-minute window's count kept; ``step``: constant per window, as before the smooth shape).

    .venv/bin/python benchmarks/policies.py [--jobs 2] [--trace azure-x20] [--policy slo,static] \
        [--rate-shape smooth|step]

``--matrix`` runs the workload matrix instead (:mod:`llmscale.workloads.matrix`: chat, code,
reasoning and long-context mixes on ramps, step changes and flash crowds, 20 simulated minutes
each) on three deployments — an 8B model on one H100 and on one A100, a 70B model on four H100s
— with the default policy set (``slo``, ``static`` and the peers), the oracle and the causal
reference, and checks the criterion per cell (:func:`judge`): ``slo`` reaches min(99%, the
reference's attainment - 0.5 points) at <= 1.15x the reference's GPU-hours, no policy dominates
it and it kills nothing on scale-down; the line also names any policy under the oracle or the
reference. Two more cells run on other fleets (``matrix_fleets.py``): code / ramp on prefill and
decode pools (``h100-8b-pd``, judged: ``slo-disagg``) and chat / ramp on A100s, H100s and H200s
(``a100-8b-mix``, judged: ``gpu-mix``, in cost).
Each cell's peak rate is 6 replicas' worth of the capacity probe on its mix, so every cell has a
fleet of a few replicas. ``--quick`` runs the H100 8B deployment only.

    .venv/bin/python benchmarks/policies.py --matrix [--quick] [--deploy h100-8b] [--cell code/step] \
        [--ray ADDRESS]

Every cell's runs are jobs of one pool: local worker processes (``--jobs``), or with ``--ray`` the
tasks of a running Ray cluster, so the whole matrix spreads over a cluster's CPUs. The results are
the same either way (``tests/backtest/test_matrix_ray.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from llmscale.backtest.causal_reference import REFERENCE
from llmscale.policies.base import DEFAULT_POLICIES

REPO = Path(__file__).resolve().parents[1]
#: the shared traces: ../shared/data beside the checkout, or $LLMSCALE_SHARED_DATA (a git worktree
#: elsewhere)
DATA = Path(os.environ.get("LLMSCALE_SHARED_DATA", REPO.parent / "shared" / "data")) / "traces"

TRACES = {
    "azure-x20": {"path": "azure_llm_2023_conv.csv", "fmt": "azure", "rate_scale": 20.0},
    "servegen-ramp": {
        "path": "servegen/language_m-large_total_rate_10min.csv",
        "fmt": "servegen",
        "start_s": 75600.0,
        "duration_s": 7200.0,
        "rate_scale": 0.3,
    },
}


def load(name: str, rate_shape: str = "smooth"):  # type: ignore[no-untyped-def]
    """The named trace; ``rate_shape`` (smooth or step) shapes ServeGen's window rates only."""
    from llmscale.workloads import load_trace, rate_scale

    spec = TRACES[name]
    w = load_trace(
        DATA / str(spec["path"]),
        str(spec["fmt"]),
        seed=0,
        start_s=spec.get("start_s"),  # type: ignore[arg-type]
        duration_s=spec.get("duration_s"),  # type: ignore[arg-type]
        rate_shape=rate_shape,
    )
    k = float(spec["rate_scale"])  # type: ignore[arg-type]
    return rate_scale(w, k, seed=0) if k != 1.0 else w


def settings_for(w):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from llmscale.backtest.runner import BacktestSettings, build_fleet
    from llmscale.backtest.sizing import replica_capacity_rps, replicas_for_rate

    base = BacktestSettings(
        model="llama-3-8b", gpu="h100-80gb", tp=1, slo_ttft_s=2.0, slo_tpot_s=0.1
    ).with_cold_start()
    perf = build_fleet(w, base, 0).perf
    cap = replica_capacity_rps(perf, base.sim, w.input_tokens, w.output_tokens, 2.0, 0.1)
    peak = replicas_for_rate(float(w.summary()["peak_1min_rps"]), cap)
    first = float((w.arrival_s < 300.0).sum()) / 300.0
    initial = replicas_for_rate(first * 1.1, cap)
    return (
        replace(
            base,
            min_replicas=1,
            max_replicas=max(64, 2 * peak),
            initial_replicas=initial,
            policy_params={"static": {"replicas": peak}},
        ),
        cap,
        peak,
    )


#: the matrix's deployments: (model, GPU, TP). The 8B model is Llama-3.1-8B (128k context) so
#: that the long-context mix fits; the 70B one Llama-3.1-70B on four H100s.
DEPLOYMENTS = {
    "h100-8b": ("llama-3.1-8b", "h100-80gb", 1),
    "a100-8b": ("llama-3.1-8b", "a100-80gb", 1),
    "h100x4-70b": ("llama-3.1-70b", "h100-80gb", 4),
    # the coarse-replica cell: a replica is four H200s, so each step of the fleet is 4 GPUs
    "h200x4-70b": ("llama-3.1-70b", "h200-141gb", 4),
}
#: deployments that run only some cells (the others run every cell)
DEPLOY_CELLS = {"h200x4-70b": ("chat/ramp",)}
#: replicas' worth of the probe's capacity at a cell's peak
MATRIX_PEAK_REPLICAS = 6
#: default policy set of `llmscale backtest` (ours, the peers, the static baseline)
MATRIX_POLICIES = DEFAULT_POLICIES


def matrix_cell(deploy: str, cell, seed: int = 0, duration_s: float = 1200.0):  # type: ignore[no-untyped-def]
    """(workload, settings, probe capacity req/s, peak replicas) of one matrix cell."""
    from dataclasses import replace

    import numpy as np

    from llmscale.backtest.feasibility import feasible_only
    from llmscale.backtest.runner import BacktestSettings
    from llmscale.backtest.sizing import replica_capacity_rps, replicas_for_rate
    from llmscale.perf import get_perf_model
    from llmscale.workloads.matrix import cell_workload, mix_lengths
    from llmscale.workloads.model import Workload

    model, gpu, tp = DEPLOYMENTS[deploy]
    base = BacktestSettings(model=model, gpu=gpu, tp=tp, slo_ttft_s=2.0, slo_tpot_s=0.1).with_cold_start()
    perf = get_perf_model(model, gpu, tp)
    # The probe on 3,000 of the mix's (feasible) requests: what one replica holds at 99%.
    inp, out = mix_lengths(cell.mix, DATA).sample(3000, np.random.default_rng(seed))
    sample = Workload.from_arrays("probe", np.arange(inp.size, dtype=np.float64), inp, out, {})
    sample = feasible_only(sample, base)
    cap = replica_capacity_rps(perf, base.sim, sample.input_tokens, sample.output_tokens, 2.0, 0.1)
    w = cell_workload(cell, MATRIX_PEAK_REPLICAS * cap, DATA, seed=seed, duration_s=duration_s)
    peak = replicas_for_rate(float(w.summary()["peak_1min_rps"]), cap)
    first = float((w.arrival_s < 120.0).sum()) / 120.0
    settings = replace(
        base,
        min_replicas=1,
        max_replicas=max(32, 3 * peak),
        initial_replicas=replicas_for_rate(first * 1.1, cap),
        policy_params={"static": {"replicas": peak}},
    )
    return w, settings, cap, peak


#: the matrix's criterion: attainment min(99%, the reference's - 0.5 point) at <= this x its measure
REFERENCE_RATIO = 1.15


def best_peer(
    rows: list[dict], reference: dict, default: str = "slo", measure: str = "gpu_hours"
) -> dict | None:  # type: ignore[type-arg]
    """The cheapest peer by ``measure`` (not ``default``, ``slo``, ``static``, the oracle or the
    reference) reaching min(99%, the reference's attainment - 0.5 points); else the peer of
    highest attainment."""
    peers = [r for r in rows if r["policy"] not in (default, "slo", "static", "oracle", REFERENCE)]
    if not peers:
        return None
    need = min(0.99, float(reference["slo_attainment"]) - 0.005)
    meeting = [r for r in peers if r["slo_attainment"] >= need]
    if meeting:
        return min(meeting, key=lambda r: float(r[measure]))
    return max(peers, key=lambda r: (float(r["slo_attainment"]), -float(r[measure])))


def judge(rows: list[dict], default: str = "slo", measure: str = "gpu_hours") -> tuple[bool, str]:  # type: ignore[type-arg]
    """The criterion in one cell for the policy ``default``: attainment >= min(99%, the causal
    reference's - 0.5 point) at <= 1.15x the reference's ``measure`` (GPU-hours; cost on a mixed
    fleet), dominated by no policy, nothing killed on scale-down. The line also says whether the
    oracle is a lower bound (no policy reaches its attainment for less) and whether the reference is
    undominated (no policy reaches min(99%, its attainment) for less)."""
    by = {r["policy"]: r for r in rows}
    slo, oracle, ref = by[default], by["oracle"], by[REFERENCE]
    r_att, r_cost = float(ref["slo_attainment"]), float(ref[measure])
    need = min(0.99, r_att - 0.005)
    ok_att = slo["slo_attainment"] >= need
    ok_cost = slo[measure] <= REFERENCE_RATIO * r_cost
    policies = [r for r in rows if r["policy"] not in ("oracle", REFERENCE)]
    dominators = [
        r["policy"]
        for r in policies
        if r["policy"] != default
        and r["slo_attainment"] >= slo["slo_attainment"]
        and r[measure] <= slo[measure]
        and (r["slo_attainment"] > slo["slo_attainment"] or r[measure] < slo[measure])
    ]
    under_oracle = [
        r["policy"]
        for r in policies
        if r["slo_attainment"] >= oracle["slo_attainment"] and r[measure] < oracle[measure]
    ]
    under_ref = [
        r["policy"] for r in policies if r["slo_attainment"] >= min(0.99, r_att) and r[measure] < r_cost
    ]
    killed = int(slo["killed_by_scale_down"])
    met = ok_att and ok_cost and not dominators and killed == 0
    unit = "GPU-hours" if measure == "gpu_hours" else measure
    why = (
        f"attainment {100 * slo['slo_attainment']:.2f}% "
        f"(need {100 * need:.2f}%: {'yes' if ok_att else 'NO'}), "
        f"{unit} {slo[measure] / r_cost:.2f}x reference ({'yes' if ok_cost else 'NO'}), "
        f"dominated by {', '.join(dominators) or 'none'}, killed {killed}; "
        f"under the oracle: {', '.join(under_oracle) or 'none'}; "
        f"under the reference: {', '.join(under_ref) or 'none'}"
    )
    return met, why


def judge_cell(rows: list[dict]) -> tuple[bool, str]:  # type: ignore[type-arg]
    """The criterion for ``slo`` in a cell of one aggregated pool of one GPU type (:func:`judge`)."""
    return judge(rows, "slo", "gpu_hours")


def run_matrix(args: argparse.Namespace) -> int:
    from llmscale.backtest.causal_reference import ReferenceSettings
    from llmscale.backtest.compare import run_backtest_seeds
    from llmscale.workloads.matrix import CELLS
    from matrix_fleets import FLEET_CELLS, fleet_cell_setup, run_fleet_cell

    chosen = args.deploy or (["h100-8b"] if args.quick else [*DEPLOYMENTS, *FLEET_CELLS])
    deploys = [d for d in chosen if d in DEPLOYMENTS]
    fleets = [d for d in chosen if d in FLEET_CELLS and (not args.cell or FLEET_CELLS[d].cell in args.cell)]
    cells = [c for c in CELLS if not args.cell or c.name in args.cell]
    policies = args.policy.split(",") if args.policy else list(MATRIX_POLICIES)
    if "slo" not in policies:
        policies.insert(0, "slo")
    summary: list[tuple[str, str, dict, dict, bool, str]] = []  # type: ignore[type-arg]
    cell_rows: list[tuple[str, str, dict, dict, dict, dict | None, str]] = []  # type: ignore[type-arg]
    everything: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    t_all = time.perf_counter()
    # Every cell's runs are jobs of one pool (local processes, or Ray tasks with --ray): a cell's
    # oracle search, the longest job, overlaps the other cells' policies instead of idling the
    # workers at the end of each cell. Each job is the same deterministic simulation wherever and
    # whenever it runs, so the results are those of running the cells one after another.
    specs = [
        (deploy, cell, *matrix_cell(deploy, cell, duration_s=args.duration_s))
        for deploy in deploys
        for cell in cells
        if deploy not in DEPLOY_CELLS or cell.name in DEPLOY_CELLS[deploy]
    ]
    if not specs and not fleets:
        print("no matrix cell matches --deploy/--cell", file=sys.stderr)
        return 2
    total = len(specs) * (len(policies) + 1)
    finished: list[str] = []

    def progress(label: str, t: float) -> None:
        # Labels are "policy #k" (the k-th cell); only finished jobs (t = inf) are reported.
        if t != float("inf"):
            return
        finished.append(label)
        name, _, k = label.rpartition(" #")
        where = f"{specs[int(k) - 1][0]} {specs[int(k) - 1][1].name}" if k.isdigit() else ""
        print(f"[{len(finished)}/{total}] {name or label} {where}".rstrip(), file=sys.stderr, flush=True)

    runs = (
        []
        if not specs
        else run_backtest_seeds(
            [w for _, _, w, _, _, _ in specs],
            policies,
            [settings for _, _, _, settings, _, _ in specs],
            include_oracle=True,
            jobs=args.jobs,
            ray_address=args.ray,
            reference=ReferenceSettings(),
            on_progress=progress,
        )
    )
    cell_runs = []
    for (deploy, cell, w, _settings, cap, peak), (results, oracle, _) in zip(specs, runs, strict=True):
        assert oracle is not None and oracle.causal_reference is not None
        rows = [r.summary for r in results] + [oracle.summary, oracle.causal_reference.summary]
        cell_runs.append((deploy, cell.name, w, cap, peak, rows, "slo", "gpu_hours"))
    # The cells on other fleets (two pools; mixed GPU types) run after the pool, each in this
    # process with its own roster, oracle and reference (matrix_fleets.py).
    for name in fleets:
        spec = FLEET_CELLS[name]
        w, settings, cap, peak = fleet_cell_setup(name, args.duration_s)
        rows = run_fleet_cell(name, w, settings, policies, args.jobs)
        print(f"[fleet cell] {name} {spec.cell}", file=sys.stderr, flush=True)
        cell_runs.append((name, spec.cell, w, cap, peak, rows, spec.default, spec.measure))
    for deploy, cell_name, w, cap, peak, rows, default, measure in cell_runs:
        o_gpu = float(next(r for r in rows if r["policy"] == "oracle")["gpu_hours"])
        print(
            f"\n{deploy} {cell_name}: {w.num_requests:,} requests over {w.duration_s / 60:.0f} min; "
            f"probe ~{cap:.2f} req/s per replica; peak minute needs {peak}"
        )
        header = f"{'policy':<22}{'SLO attain.':>12}{'GPU-hours':>11}{'x oracle':>10}"
        print(f"{header}{'TPOT p99':>10}{'killed':>8}" + (f"{'cost':>9}" if measure == "cost" else ""))
        for row in sorted(rows, key=lambda r: -float(r["slo_attainment"] or 0)):
            print(
                f"{row['policy']:<22}{100 * row['slo_attainment']:>11.2f}%{row['gpu_hours']:>11.3f}"
                f"{row['gpu_hours'] / o_gpu:>10.2f}{row['tpot_p99_s'] or float('nan'):>10.3f}"
                f"{row['killed_by_scale_down']:>8}" + (f"{row['cost']:>9.3f}" if measure == "cost" else "")
            )
        met, why = judge(rows, default, measure)
        print(f"{default}: {why}")
        by = {r["policy"]: r for r in rows}
        summary.append((deploy, cell_name, by[default], by["oracle"], met, why))
        peer = best_peer(rows, by[REFERENCE], default, measure)
        cell_rows.append((deploy, cell_name, by["oracle"], by[REFERENCE], by[default], peer, measure))
        everything[f"{deploy} {cell_name}"] = rows
    print(f"\nmatrix ({time.perf_counter() - t_all:.0f} s)")
    print(
        f"{'deployment':<12}{'cell':<22}{'slo att.':>10}{'oracle att.':>12}"
        f"{'slo GPU-h':>11}{'oracle GPU-h':>13}{'x oracle':>10}  met"
    )
    for deploy, name, slo, oracle, met, _ in summary:
        print(
            f"{deploy:<12}{name:<22}{100 * slo['slo_attainment']:>9.2f}%"
            f"{100 * oracle['slo_attainment']:>11.2f}%"
            f"{slo['gpu_hours']:>11.3f}{oracle['gpu_hours']:>13.3f}"
            f"{slo['gpu_hours'] / oracle['gpu_hours']:>10.2f}  {'yes' if met else 'NO'}"
        )
    print(
        f"\n{'deployment':<12}{'cell':<22}{'oracle':>16}{'reference':>16}{'slo':>16}  best peer"
        "  (GPU-hours; the mixed cell: cost, and its slo is gpu-mix; two pools: slo-disagg)"
    )
    for deploy, name, orc, ref, slo, peer, measure in cell_rows:
        cells_text = "".join(f"{100 * r['slo_attainment']:>8.2f}%{r[measure]:>7.3f}" for r in (orc, ref, slo))
        peer_text = (
            "none"
            if peer is None
            else f"{peer['policy']} {100 * peer['slo_attainment']:.2f}% {peer[measure]:.3f}"
        )
        print(f"{deploy:<12}{name:<22}{cells_text}  {peer_text}")
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=2))
    failed = [f"{d} {n}" for d, n, _, _, met, _ in summary if not met]
    if failed:
        print(f"\nacceptance NOT met in {len(failed)} of {len(summary)} cells: {', '.join(failed)}")
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--trace", action="append", choices=sorted(TRACES))
    ap.add_argument("--policy", help="comma-separated subset (default: all)")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument(
        "--rate-shape",
        default="smooth",
        choices=("smooth", "step"),
        help="ServeGen traces: rate continuous between window centres (smooth) or constant per window",
    )
    ap.add_argument("--matrix", action="store_true", help="run the workload matrix (see the docstring)")
    ap.add_argument("--quick", action="store_true", help="matrix: the H100 8B deployment only")
    ap.add_argument(
        "--deploy",
        action="append",
        choices=[*sorted(DEPLOYMENTS), "a100-8b-mix", "h100-8b-pd"],
        help="matrix: these only (h100-8b-pd: code/ramp on prefill/decode pools; a100-8b-mix: chat/ramp "
        "on A100/H100/H200; benchmarks/matrix_fleets.py)",
    )
    ap.add_argument("--cell", action="append", help="matrix: these cells only (mix/shape)")
    ap.add_argument(
        "--duration-s",
        type=float,
        default=1200.0,
        help="matrix: simulated seconds per cell (default 1200; the README's table is measured at it)",
    )
    ap.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="matrix: run every (cell, policy) job as a task on this running Ray cluster (as backtest --ray)",
    )
    args = ap.parse_args()
    if not DATA.is_dir():
        print(f"needs {DATA} (../shared/data beside the checkout)", file=sys.stderr)
        return 2
    if args.matrix:
        return run_matrix(args)

    from llmscale.backtest.compare import run_backtest
    from llmscale.policies.base import policy_names

    policies = args.policy.split(",") if args.policy else policy_names()
    failures: list[str] = []
    everything = {}
    for name in args.trace or list(TRACES):
        w = load(name, args.rate_shape)
        settings, cap, peak = settings_for(w)
        t0 = time.perf_counter()
        results, oracle, _ = run_backtest(w, policies, settings, include_oracle=True, jobs=args.jobs)
        wall = time.perf_counter() - t0
        assert oracle is not None
        o_gpu = oracle.summary["gpu_hours"]
        print(
            f"\n{name} ({args.rate_shape}): {w.num_requests:,} requests over {w.duration_s / 60:.0f} min; "
            f"one replica ~{cap:.2f} req/s; "
            f"peak minute needs {peak}; initial fleet {settings.initial_replicas}; wall {wall:.0f} s"
        )
        print(
            f"{'policy':<22}{'SLO attain.':>12}{'GPU-hours':>11}{'x oracle':>10}{'TTFT p99':>10}{'killed':>8}"
        )
        rows = [r.summary for r in results] + [oracle.summary]
        for row in sorted(rows, key=lambda r: -float(r["slo_attainment"] or 0)):
            print(
                f"{row['policy']:<22}{100 * row['slo_attainment']:>11.2f}%{row['gpu_hours']:>11.2f}"
                f"{row['gpu_hours'] / o_gpu:>10.2f}{row['ttft_p99_s'] or float('nan'):>10.2f}"
                f"{row['killed_by_scale_down']:>8}"
            )
        everything[name] = rows
        by = {r["policy"]: r for r in rows}
        if "slo" in by:
            slo = by["slo"]
            ok_att = slo["slo_attainment"] >= 0.99
            ok_cost = slo["gpu_hours"] <= 1.3 * o_gpu
            dominators = [
                r["policy"]
                for r in rows
                if r["policy"] not in ("slo", "oracle")
                and r["slo_attainment"] > slo["slo_attainment"]
                and r["gpu_hours"] < slo["gpu_hours"]
            ]
            print(
                f"slo: attainment {100 * slo['slo_attainment']:.2f}% (>= 99%: {'yes' if ok_att else 'NO'}), "
                f"GPU-hours {slo['gpu_hours'] / o_gpu:.2f}x oracle (<= 1.3x: {'yes' if ok_cost else 'NO'}), "
                f"dominated by: {', '.join(dominators) or 'none'}"
            )
            if not (ok_att and ok_cost and not dominators):
                failures.append(name)
        killers = [r["policy"] for r in rows if r["killed_by_scale_down"]]
        print(f"policies that killed requests on scale-down: {', '.join(killers) or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=2))
    if failures:
        print(f"\nacceptance NOT met on: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
