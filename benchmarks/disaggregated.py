"""The disaggregated matrix cell: one cell of the workload matrix served by prefill and decode pools.

The cell's workload and settings are the matrix's (``benchmarks/policies.py``'s
``matrix_cell``: the H100 8B deployment, chat/ramp by default, 20 simulated minutes, SLO TTFT
<= 2 s and TPOT <= 0.1 s). It runs, side by side: ``slo`` on the aggregated fleet (the matrix's
own row); ``slo-disagg``, ``dynamo-disagg`` and llm-d's ``wva-saturation`` (pool-wise) on the
disaggregated fleet (a controller per pool, :mod:`llmscale.backtest.disagg`); the two-pool
oracle (the cheapest pair of constant pool sizes meeting 99%, then shaped to the load:
:mod:`llmscale.backtest.disagg_reference`) and its causal reference. It prints attainment and
GPU-hours, per pool too, and judges ``slo-disagg`` as the matrix judges ``slo``: min(99%, the
reference's attainment - 0.5 points) at <= 1.15x the reference's GPU-hours. Other cells run with
``--cell`` (the matrix's own two-pool cell is ``policies.py --matrix --deploy h100-8b-pd``).

    .venv/bin/python benchmarks/disaggregated.py [--deploy h100-8b] [--cell chat/ramp|a,b|all] \
        [--interconnect infiniband] [--json out.json]

``--cell all`` (or a list) runs several cells and ends with one verdict line per cell.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# the matrix benchmark beside this one
from policies import DEPLOYMENTS, matrix_cell


def run_cell(deploy: str, cell_name: str, interconnect: str) -> tuple[list[dict], bool, str]:
    """(rows, judged criterion met, its one-line verdict) of one matrix cell split in two pools."""
    from llmscale.backtest.causal_reference import ReferenceSettings
    from llmscale.backtest.disagg import initial_pools, run_disaggregated, run_disaggregated_oracle
    from llmscale.backtest.disagg_reference import run_two_pool_yardsticks
    from llmscale.backtest.runner import run_policy
    from llmscale.sim.disagg import DisaggConfig
    from llmscale.workloads.matrix import CELLS

    cell = next(c for c in CELLS if c.name == cell_name)
    w, settings, cap, peak = matrix_cell(deploy, cell)
    # Each pool starts as `backtest --disaggregated` starts it (and the matrix's two-pool cell):
    # the cheapest constant pair serving the first five minutes, as the aggregated fleet starts
    # sized for them.
    first = replace(settings, disaggregated=DisaggConfig(interconnect=interconnect))
    p, d = initial_pools(w, first)
    assert first.disaggregated is not None
    pools = replace(first.disaggregated, prefill_initial_replicas=p, decode_initial_replicas=d)
    split = replace(settings, disaggregated=pools)
    print(
        f"{deploy} {cell.name} (disaggregated over {interconnect}): {w.num_requests:,} requests "
        f"over {w.duration_s / 60:.0f} min; probe ~{cap:.2f} req/s per aggregated replica; "
        f"peak needs {peak}; pools start at {p} prefill + {d} decode"
    )
    rows = []
    t0 = time.perf_counter()
    agg = run_policy(w, "slo", settings).summary
    rows.append({"policy": "slo (aggregated)", **{k: agg[k] for k in ("slo_attainment", "gpu_hours")}})
    for name in ("slo-disagg", "dynamo-disagg", "wva-saturation"):
        rows.append(run_disaggregated(w, name, split).as_json())
    pair = run_disaggregated_oracle(w, split)
    shaped, ref = run_two_pool_yardsticks(w, split, ReferenceSettings())
    reference = ref.as_json()
    oracle = shaped.as_json()
    rows.append({**pair.as_json(), "policy": "oracle (constant pair)"})
    rows.append(oracle)
    rows.append(reference)
    print(f"wall {time.perf_counter() - t0:.0f} s")
    print(
        f"{'policy':<20}{'SLO attain.':>12}{'GPU-hours':>11}{'x oracle':>10}"
        f"{'prefill GPU-h':>15}{'decode GPU-h':>14}"
    )
    o_gpu = float(oracle["gpu_hours"])
    for r in rows:
        pools = r.get("pools") or {}
        pre = pools.get("prefill", {}).get("gpu_hours")
        dec = pools.get("decode", {}).get("gpu_hours")
        print(
            f"{r['policy']:<20}{100 * r['slo_attainment']:>11.2f}%{r['gpu_hours']:>11.3f}"
            f"{r['gpu_hours'] / o_gpu:>10.2f}{'' if pre is None else f'{pre:.3f}':>15}"
            f"{'' if dec is None else f'{dec:.3f}':>14}"
        )
    slo = next(r for r in rows if r["policy"] == "slo-disagg")
    att = float(slo["slo_attainment"])
    need = min(0.99, float(reference["slo_attainment"]) - 0.005)
    ok_att = att >= need
    ratio = slo["gpu_hours"] / reference["gpu_hours"]
    ok_cost = ratio <= 1.15
    verdict = (
        f"slo-disagg: attainment {100 * att:.2f}% (need {100 * need:.2f}%: {'yes' if ok_att else 'NO'}), "
        f"GPU-hours {ratio:.2f}x the two-pool causal reference ({'yes' if ok_cost else 'NO'}); "
        f"oracle pair {oracle['oracle_pair']}"
    )
    print(verdict)
    return rows, ok_att and ok_cost, verdict


def main() -> int:
    from llmscale.perf.interconnect import INTERCONNECTS
    from llmscale.workloads.matrix import CELLS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deploy", default="h100-8b", choices=sorted(DEPLOYMENTS))
    ap.add_argument(
        "--cell",
        default="chat/ramp",
        help=f"a cell or a comma-separated list of them, or 'all' ({', '.join(c.name for c in CELLS)})",
    )
    ap.add_argument("--interconnect", default="infiniband", choices=sorted(INTERCONNECTS))
    ap.add_argument("--json", help="write the rows here (by cell)")
    args = ap.parse_args()
    names = [c.name for c in CELLS] if args.cell == "all" else args.cell.split(",")
    unknown = [n for n in names if n not in {c.name for c in CELLS}]
    if unknown:
        ap.error(f"unknown cell {unknown[0]!r}; cells: {', '.join(c.name for c in CELLS)}")
    by_cell: dict[str, list[dict]] = {}
    verdicts = []
    for name in names:
        rows, ok, verdict = run_cell(args.deploy, name, args.interconnect)
        by_cell[name] = rows
        verdicts.append((name, ok, verdict))
        print()
    if len(names) > 1:
        print(f"{sum(ok for _, ok, _ in verdicts)} of {len(verdicts)} cells met:")
        for name, _, verdict in verdicts:
            print(f"  {name:<22}{verdict}")
    if args.json:
        Path(args.json).write_text(json.dumps(by_cell if len(names) > 1 else by_cell[names[0]], indent=2))
    return 0 if all(ok for _, ok, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
