"""How well can *any* policy that does not see the future do on a trace of rate steps?

Two measurements: ``--matrix`` (below, after the ServeGen one) and the ServeGen one
(the default).

The ServeGen rate files give one arrival rate per 10-minute window. Under
``--rate-shape step`` the generated load changes in steps at window boundaries
(on the policy benchmark's ``servegen-ramp``: 45.6 -> 83.1 req/s, 72.1 ->
116.0, 121.1 -> 175.0, ...); under ``smooth`` (the loader's default) the rate
is continuous and each window keeps its count, so it rises inside a window
above the window's mean at a peak. The benchmark runs both shapes and prints
one table each. A replica asked for at a step serves one cold start
later, so every policy that learns of a step only when it happens is short of
capacity for at least that long, unless it already holds headroom.

This benchmark measures the price of that with a deliberately over-informed
policy, ``window-clairvoyant``: at every tick (5 s) it asks for
``ceil(rate of the current window x (1 + headroom) / capacity)`` replicas,
where the window's rate is read from the workload itself *the instant the
window starts* (zero detection delay, no noise in the estimate) and
``capacity`` is the simulator-measured requests/s one replica sustains within
the SLO on this workload's lengths (``backtest/sizing.py``, the figure the
policy benchmark prints). It scales down at once (no stabilisation) and
drains without killing. A real policy knows strictly less: it must see
arrivals before it can tell a step from noise. So for each headroom the
printed attainment and GPU-hours are what a causal policy of this shape can
at best reach; the oracle (hindsight, ``backtest/oracle.py``) is the yardstick
of the policy issue's "<= 1.3x the oracle's GPU-hours".

    .venv/bin/python benchmarks/causal_bound.py [--trace servegen-ramp] \
        [--headroom 0,0.3,0.45,0.6,0.9] [--oracle-gpu-hours X[,Y]] [--jobs 2] [--rate-shape both]

``--oracle-gpu-hours`` skips the oracle's search (about 20 minutes per shape on
the loaded 2-core machine) with figures from an earlier run, one per shape in
the order smooth, step.

Measured 2026-12-01 (``--headroom 0,0.45,0.9``, both shapes, ~10 minutes in
all): the same 623,109 requests and window rates under both; the largest
minute-to-minute step is x1.19 smooth and x1.83 step. Oracle 11.32 GPU-hours
(smooth) and 11.11 (step), both 99.59%. Headroom 0: 45.6% / 45.3%; 0.45:
99.61% at 1.31x / 99.03% at 1.32x; 0.9: 99.62% at 1.65x / 99.61% at 1.67x.
So even a policy told each window's mean at once needs ~45% headroom on
either shape: the smooth rate rises inside a window above the window's mean.

``--matrix``: the workload matrix's step and flash cells (``benchmarks/policies.py
--matrix``; chat/step, chat/flash and code/step on every deployment). Before the
jump the load is flat (50% of the peak); a causal policy's fleet at the jump was
chosen on that flat history. Per cell, with the simulator
(:mod:`llmscale.backtest.causal_bound`):

1. the oracle on the cell, and the attainment the issue requires there:
   min(99%, oracle - 0.5 points);
2. ``N_pre``: the fewest replicas that must already serve at the jump for a run
   to reach it when the causal side gets every advantage named here: it orders
   replicas the instant the jump arrives (zero detection delay), they serve after
   the fastest start that is not a replica held all along (the warm-node tier,
   53 s for 8B on an H100, as if every new replica found a kept node, which the
   simulator does not charge), and after that the fleet is as large as the
   backtest allows (``max_replicas``), to the end of the run. Sleeping replicas
   wake in 1.6 s but hold their GPU and are charged like serving ones, so a pool
   counts in ``N_pre``. ``N_pre`` with the backtest's default start (108 s) is
   printed too;
3. the cell's *flat companion*: its own requests before the jump, then the flat
   rate to the end (the same history a causal policy saw; no jump). A policy that
   does not know when a jump comes holds ``N_pre`` at every moment of a flat
   history, so there it spends at least ``N_pre`` x GPUs x the window; against
   the companion's oracle that is the ratio printed. Above 1.3, no causal policy
   meets the issue's criterion on both the cell and an ordinary flat load;
4. reactive schedules on the cell itself: ``N_pre`` .. ``N_pre`` + 2 held, each
   then the fewest ``post`` replicas (serving one warm-node start after
   the jump; after a flash crowd the fleet drains back) that reach the target.

    .venv/bin/python benchmarks/causal_bound.py --matrix [--quick] [--deploy h100-8b] [--jobs 2]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from policies import (  # the policy benchmark's traces and matrix
    DATA,
    DEPLOYMENTS,
    MATRIX_PEAK_REPLICAS,
    TRACES,
    load,
    matrix_cell,
    settings_for,
)

WINDOW_S = 600.0


@dataclass(frozen=True)
class WindowClairvoyant:
    """Knows each window's arrival rate from the window's first instant; pays the cold start."""

    rates_rps: tuple[float, ...]
    capacity_rps: float
    headroom: float
    name: str = "window-clairvoyant"
    tick_s: float = 5.0
    guard_overrides: dict[str, Any] = field(
        default_factory=lambda: {
            "pending_aware": False,
            "stabilization_down_s": 0.0,
            "headroom_max_usage": None,
            "drain_aware": True,
        }
    )

    def initial_state(self) -> None:
        return None

    def decide(self, signals: Any, state: None, now_s: float) -> tuple[Any, None]:
        from llmscale.types import Decision

        k = min(int(now_s // WINDOW_S), len(self.rates_rps) - 1)
        want = self.rates_rps[k] * (1.0 + self.headroom) / self.capacity_rps
        return Decision(max(1, math.ceil(want - 1e-9)), "window-rate", {}), None


def _window_rates(w: Any) -> tuple[float, ...]:
    edges = np.arange(0.0, w.duration_s + WINDOW_S, WINDOW_S)
    counts, _ = np.histogram(w.arrival_s, bins=edges)
    return tuple(float(c) / WINDOW_S for c in counts)


def _run_headroom(trace: str, shape: str, headroom: float) -> dict[str, float]:
    from llmscale.backtest.runner import run_policy

    w = load(trace, shape)
    settings, cap, _peak = settings_for(w)
    policy = WindowClairvoyant(_window_rates(w), cap, headroom)
    t0 = time.perf_counter()
    r = run_policy(w, policy.name, settings, policy=policy).summary
    return {
        "headroom": headroom,
        "slo_attainment": float(r["slo_attainment"]),
        "gpu_hours": float(r["gpu_hours"]),
        "killed": float(r["killed_by_scale_down"]),
        "wall_s": time.perf_counter() - t0,
    }


def _run_oracle(trace: str, shape: str) -> dict[str, float]:
    from llmscale.backtest.oracle import run_oracle

    w = load(trace, shape)
    settings, _cap, _peak = settings_for(w)
    r = run_oracle(w, settings).summary
    return {"slo_attainment": float(r["slo_attainment"]), "gpu_hours": float(r["gpu_hours"])}


#: the matrix's cells with a jump (mix, shape)
JUMP_CELLS = (("chat", "step"), ("chat", "flash"), ("code", "step"))
#: the issue's bound on GPU-hours, x the oracle's
COST_BOUND = 1.3


def _jump_s(shape: str, duration_s: float) -> tuple[float, float | None]:
    """(when the load jumps, when a flash crowd ends or None) on the curve's axis, as
    :mod:`llmscale.workloads.matrix` draws them: a step at a third of the window, a 3-minute
    flash crowd from its middle."""
    if shape == "step":
        return duration_s / 3.0, None
    return duration_s / 2.0, duration_s / 2.0 + 180.0


def _matrix_bound(deploy: str, mix: str, shape: str) -> dict[str, Any]:
    """Everything the ``--matrix`` table prints for one cell (one process: the runs are sequential)."""
    from llmscale.backtest.causal_bound import (
        ReactivePlan,
        flat_companion,
        run_reactive,
        run_steps,
        smallest_pre,
    )
    from llmscale.backtest.oracle import run_oracle
    from llmscale.perf import start_tiers
    from llmscale.workloads.matrix import MatrixCell, mix_lengths
    from llmscale.workloads.synthetic import workload_from_rate_curve

    t0 = time.perf_counter()
    cell = MatrixCell(mix, shape)
    w, s, cap, _peak = matrix_cell(deploy, cell)
    duration_s = 1200.0
    # Workload.from_arrays starts the axis at the first arrival: the jump moves with it.
    offset_s = float(w.meta.get("t0_offset_s", 0.0))  # type: ignore[arg-type]
    jump_s, flash_end_s = _jump_s(shape, duration_s)
    event_s = jump_s - offset_s
    back_s = None if flash_end_s is None else flash_end_s - offset_s
    oracle = run_oracle(w, s).summary
    need = min(0.99, float(oracle["slo_attainment"]) - 0.005)
    default_start_s = s.sim.pending_s + s.sim.loading_s + s.sim.warmup_s
    warm_start_s = start_tiers(s.model, s.gpu, s.tp).warm_node.total_s
    hi = s.max_replicas

    def search(start_s: float) -> Any:
        return smallest_pre(lambda n: run_reactive(w, s, ReactivePlan(n, event_s, start_s, hi)), need, 1, hi)

    fast = search(warm_start_s)
    slow = search(default_start_s)
    row: dict[str, Any] = {
        "deploy": deploy,
        "cell": cell.name,
        "gpus": s.tp,
        "requests": w.num_requests,
        "oracle_attainment": float(oracle["slo_attainment"]),
        "oracle_gpu_hours": float(oracle["gpu_hours"]),
        "oracle_schedule": oracle["oracle_search"]["schedule"],
        "need": need,
        "warm_start_s": warm_start_s,
        "default_start_s": default_start_s,
        "n_pre": fast.pre_replicas,
        "n_pre_tried": fast.tried,
        "n_pre_default_start": slow.pre_replicas,
        "n_pre_default_start_tried": slow.tried,
    }
    # The flat companion: this cell's own history until the jump, the flat rate after it.
    base_rps = 0.5 * MATRIX_PEAK_REPLICAS * cap
    flat_draw = workload_from_rate_curve(
        [0.0, duration_s],
        [base_rps, base_rps],
        seed=0,
        lengths=mix_lengths(mix, DATA),
        name=f"matrix:{cell.name}:flat",
        stream=f"{cell.name}/flat",
    )
    flat = flat_companion(w, flat_draw, event_s)
    flat_oracle = run_oracle(flat, s).summary
    row["flat_requests"] = flat.num_requests
    row["flat_oracle_attainment"] = float(flat_oracle["slo_attainment"])
    row["flat_oracle_gpu_hours"] = float(flat_oracle["gpu_hours"])
    row["flat_oracle_replicas_mean"] = float(flat_oracle["replicas_mean"])
    if slow.pre_replicas is not None:
        held = run_steps(flat, s, slow.pre_replicas, [], default_start_s).summary
        row["flat_hold_default_start_gpu_hours"] = float(held["gpu_hours"])
    if fast.pre_replicas is not None:
        held = run_steps(flat, s, fast.pre_replicas, [], warm_start_s).summary
        row["flat_hold_gpu_hours"] = float(held["gpu_hours"])
        row["flat_hold_attainment"] = float(held["slo_attainment"])
        # A policy that cannot tell when the jump comes holds N_pre over the cell's flat part too,
        # and at least that during and after the jump: N_pre x GPUs x the arrivals' span.
        row["cell_floor_gpu_hours"] = fast.pre_replicas * s.tp * float(w.arrival_s[-1]) / 3600.0
        # Reactive schedules on the cell itself: per count held, the fewest replicas after the jump.
        found_by_pre: list[dict[str, Any]] = []
        for pre in range(fast.pre_replicas, min(hi, fast.pre_replicas + 2) + 1):
            found = smallest_pre(
                lambda m, pre=pre: run_reactive(w, s, ReactivePlan(pre, event_s, warm_start_s, m, back_s)),
                need,
                pre,
                hi,
            )
            if found.run is None:
                continue
            found_by_pre.append(
                {
                    "pre": pre,
                    "post": found.pre_replicas,
                    "gpu_hours": float(found.run.summary["gpu_hours"]),
                    "attainment": float(found.run.summary["slo_attainment"]),
                    "killed": int(found.run.summary["killed_by_scale_down"]),
                }
            )
        row["reactive"] = found_by_pre
        row["causal_best"] = min(found_by_pre, key=lambda f: f["gpu_hours"], default=None)
        # The schedule that holds N_pre itself: the one a policy passing the flat test would run.
        row["causal_at_n_pre"] = next((f for f in found_by_pre if f["pre"] == fast.pre_replicas), None)
    row["wall_s"] = time.perf_counter() - t0
    return row


def _verdict(row: dict[str, Any]) -> str:
    if row["n_pre"] is None:
        return "unreachable even with max_replicas held"
    ratio = row["flat_hold_gpu_hours"] / row["flat_oracle_gpu_hours"]
    if ratio > COST_BOUND:
        return "no causal policy (flat load > 1.3x)"
    return f"achievable: hold {row['n_pre']} ({ratio:.2f}x on flat)"


def run_matrix_bound(deploys: list[str], jobs: int, json_out: str | None) -> int:
    tasks = [(d, mix, shape) for d in deploys for mix, shape in JUMP_CELLS]
    t_all = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        rows = list(pool.map(_matrix_bound, *zip(*tasks, strict=True)))
    for r in rows:
        tried = ", ".join(f"{n}: {100 * a:.2f}%" for n, a in sorted(r["n_pre_tried"].items()))
        print(
            f"\n{r['deploy']} {r['cell']}: {r['requests']:,} requests; "
            f"oracle {100 * r['oracle_attainment']:.2f}% "
            f"at {r['oracle_gpu_hours']:.3f} GPU-h (schedule {r['oracle_schedule']}); "
            f"need {100 * r['need']:.2f}%; wall {r['wall_s']:.0f} s"
        )
        print(f"  held at the jump, warm-node start {r['warm_start_s']:.0f} s -> attainment: {tried}")
        print(
            f"  N_pre {r['n_pre']} (default start {r['default_start_s']:.0f} s: {r['n_pre_default_start']}); "
            f"flat companion ({r['flat_requests']:,} requests): "
            f"oracle {100 * r['flat_oracle_attainment']:.2f}% "
            f"at {r['flat_oracle_gpu_hours']:.3f} GPU-h (mean {r['flat_oracle_replicas_mean']:.2f} replicas)"
        )
        if r["n_pre"] is not None:
            print(
                f"  holding {r['n_pre']} on the flat companion: {100 * r['flat_hold_attainment']:.2f}% "
                f"at {r['flat_hold_gpu_hours']:.3f} GPU-h "
                f"({r['flat_hold_gpu_hours'] / r['flat_oracle_gpu_hours']:.2f}x its oracle); "
                f"holding {r['n_pre']} on the cell's whole span: {r['cell_floor_gpu_hours']:.3f} GPU-h "
                f"({r['cell_floor_gpu_hours'] / r['oracle_gpu_hours']:.2f}x the cell's oracle)"
            )
            if "flat_hold_default_start_gpu_hours" in r:
                slow_h = r["flat_hold_default_start_gpu_hours"]
                print(
                    f"  with the default start, holding {r['n_pre_default_start']} on the flat companion: "
                    f"{slow_h:.3f} GPU-h ({slow_h / r['flat_oracle_gpu_hours']:.2f}x its oracle)"
                )
            for b in r["reactive"]:
                print(
                    f"  reactive schedule on the cell: {b['pre']} then {b['post']} -> "
                    f"{100 * b['attainment']:.2f}% at {b['gpu_hours']:.3f} GPU-h "
                    f"({b['gpu_hours'] / r['oracle_gpu_hours']:.2f}x the oracle), killed {b['killed']}"
                )
    print(f"\ncausal bound on the matrix's jump cells ({time.perf_counter() - t_all:.0f} s)")
    print(
        "N_pre: replicas held at the jump (warm-node start; 'dflt': with the default start); flat:\n"
        "the companion without the jump, its oracle's GPU-h and holding N_pre there; cell: the\n"
        "cell's oracle, the reactive schedule holding N_pre (GPU-h, x the oracle), the cheapest\n"
        "reactive schedule found (x the oracle) and N_pre held over the whole span (x the oracle)"
    )
    head = (
        f"{'deployment':<12}{'cell':<12}{'need':>8}{'N_pre':>6}{'dflt':>5}{'flat orc':>9}"
        f"{'hold':>7}{'ratio':>6}{'dflt':>6}{'cell orc':>9}{'causal':>8}{'x':>6}{'best x':>7}"
        f"{'floor x':>8}  verdict"
    )
    print(head)
    for r in rows:
        hold = r.get("flat_hold_gpu_hours")
        slow_h = r.get("flat_hold_default_start_gpu_hours")
        b = r.get("causal_at_n_pre")
        best = r.get("causal_best")
        flat_o, cell_o = r["flat_oracle_gpu_hours"], r["oracle_gpu_hours"]
        print(
            f"{r['deploy']:<12}{r['cell']:<12}{100 * r['need']:>7.2f}%{r['n_pre']!s:>6}"
            f"{r['n_pre_default_start']!s:>5}{flat_o:>9.3f}"
            + (f"{hold:>7.3f}{hold / flat_o:>6.2f}" if hold is not None else f"{'-':>13}")
            + (f"{slow_h / flat_o:>6.2f}" if slow_h is not None else f"{'-':>6}")
            + f"{cell_o:>9.3f}"
            + (f"{b['gpu_hours']:>8.3f}{b['gpu_hours'] / cell_o:>6.2f}" if b else f"{'-':>14}")
            + (f"{best['gpu_hours'] / cell_o:>7.2f}" if best else f"{'-':>7}")
            + (f"{r['cell_floor_gpu_hours'] / cell_o:>8.2f}" if hold is not None else f"{'-':>8}")
            + f"  {_verdict(r)}"
        )
    if json_out:
        import json

        Path(json_out).write_text(json.dumps(rows, indent=2, default=str))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", action="store_true", help="the workload matrix's step and flash cells")
    ap.add_argument("--quick", action="store_true", help="--matrix on the H100 8B deployment only")
    ap.add_argument("--deploy", action="append", choices=sorted(DEPLOYMENTS), help="--matrix: these only")
    ap.add_argument("--json", help="--matrix: write every row here")
    ap.add_argument("--trace", default="servegen-ramp", choices=sorted(TRACES))
    ap.add_argument("--headroom", default="0,0.3,0.45,0.6,0.9", help="comma-separated headroom fractions")
    ap.add_argument("--oracle-gpu-hours", help="skip the oracle; figures per shape, comma-separated")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rate-shape", default="both", choices=("both", "smooth", "step"))
    args = ap.parse_args()
    if not DATA.is_dir():
        print(f"needs {DATA} (../shared/data beside the checkout)", file=sys.stderr)
        return 2
    if args.matrix or args.quick or args.deploy:
        deploys = args.deploy or (["h100-8b"] if args.quick else list(DEPLOYMENTS))
        return run_matrix_bound(deploys, args.jobs, args.json)
    headrooms = [float(x) for x in args.headroom.split(",") if x.strip()]
    shapes = ["smooth", "step"] if args.rate_shape == "both" else [args.rate_shape]
    given = [float(x) for x in args.oracle_gpu_hours.split(",")] if args.oracle_gpu_hours else []
    if given and len(given) != len(shapes):
        print(f"--oracle-gpu-hours needs {len(shapes)} figures ({', '.join(shapes)})", file=sys.stderr)
        return 2
    for k, shape in enumerate(shapes):
        _report(args.trace, shape, headrooms, given[k] if given else None, args.jobs)
    return 0


def _report(
    trace: str, shape: str, headrooms: list[float], oracle_gpu_hours: float | None, jobs: int
) -> None:
    w = load(trace, shape)
    _settings, cap, _peak = settings_for(w)
    rates = _window_rates(w)
    print(f"\n{trace} ({shape} rate): {w.num_requests:,} requests; one replica sustains {cap:.2f} req/s")
    print("10-minute window rates (req/s): " + ", ".join(f"{r:.1f}" for r in rates))
    steps = [b / a for a, b in itertools.pairwise(rates) if a > 0]
    print(f"largest step up between windows: x{max(steps):.2f}")
    minute = np.histogram(w.arrival_s, bins=np.arange(0.0, w.duration_s + 60.0, 60.0))[0] / 60.0
    print(
        f"largest step up between minutes: x{max(b / a for a, b in itertools.pairwise(minute) if a > 0):.2f}"
    )

    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        oracle_f = None if oracle_gpu_hours else pool.submit(_run_oracle, trace, shape)
        rows = list(pool.map(_run_headroom, [trace] * len(headrooms), [shape] * len(headrooms), headrooms))
        given = {"gpu_hours": oracle_gpu_hours, "slo_attainment": None}
        oracle = oracle_f.result() if oracle_f else given
    o_gpu = float(oracle["gpu_hours"])  # type: ignore[arg-type]
    o_att = oracle["slo_attainment"]
    print(
        f"oracle: {o_gpu:.2f} GPU-hours"
        + (f", attainment {100 * o_att:.2f}%" if o_att is not None else " (given with --oracle-gpu-hours)")
    )
    print(f"{'headroom':>9}{'attainment':>12}{'GPU-hours':>11}{'x oracle':>10}{'killed':>8}{'wall s':>8}")
    for r in rows:
        print(
            f"{r['headroom']:>9.2f}{100 * r['slo_attainment']:>11.2f}%{r['gpu_hours']:>11.2f}"
            f"{r['gpu_hours'] / o_gpu:>10.2f}{int(r['killed']):>8}{r['wall_s']:>8.0f}"
        )
    ok = [r for r in rows if r["slo_attainment"] >= 0.99]
    if ok:
        best = min(ok, key=lambda r: r["gpu_hours"])
        print(
            f"cheapest headroom reaching 99%: {best['headroom']:.2f} at {best['gpu_hours'] / o_gpu:.2f}x "
            "the oracle's GPU-hours, with the window's rate known at once"
        )
    else:
        print("no headroom tried reaches 99%")


if __name__ == "__main__":
    sys.exit(main())
