#!/usr/bin/env python3
"""Fidelity of llmscale's step-time model against the public calibration measurements.

Usage::

    .venv/bin/python benchmarks/perf_fidelity.py [CALIBRATION_DIR]

Prints, per source and overall, the median and worst absolute percentage error
of the committed coefficients on the HELD-OUT points (and on the fit points
for reference); then the END-TO-END errors on real vLLM closed batches
(shared/data/calibration/argonne) per (model, GPU, TP) configuration, held-out
configurations apart: batch latency (makespan), time per output token at batch 1,
time to first token, whether TP 2/4 is faster than TP 1 where the engine was, and
the batch-64 / batch-1 latency ratio; then sanity anchors and example step times,
KV capacities and cold starts.
CALIBRATION_DIR defaults to ``<repo>/../shared/data/calibration``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from llmscale.offline.calibration import load_points  # noqa: E402
from llmscale.offline.perf_fidelity import e2e_report  # noqa: E402
from llmscale.offline.perf_fit import LLAMA2_7B_H100_BATCH1_TPOT_MS, SARATHI_DECODE_MS, anchors, error_report  # noqa: E402
from llmscale.perf import cold_start, get_perf_model  # noqa: E402
from llmscale.perf.coefficients import load_coefficients  # noqa: E402


def _fmt(e: dict[str, object]) -> str:
    if not e.get("n"):
        return f"{'-':>5} {'-':>8} {'-':>8}"
    return f"{e['n']:>5} {e['median_ape_pct']:>7.2f}% {e['worst_ape_pct']:>7.2f}%"


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else REPO.parent / "shared" / "data" / "calibration"
    if not root.is_dir():
        print(f"calibration data not found at {root}", file=sys.stderr)
        return 2
    coeffs = load_coefficients()
    points = load_points(root)
    report = error_report(points, coeffs)

    print("Step-time model fidelity (absolute % error of model vs measurement)")
    cols = f"{'median':>8} {'worst':>8}"
    print(f"{'source':20s} | {'held-out: n':>11} {cols} | {'fit: n':>6} {cols}")
    for source, e in report["by_source"].items():
        print(f"{source:20s} | {_fmt(e['held_out']):>29} | {_fmt(e['fit'])}")
    o = report["overall"]
    print(f"{'OVERALL':20s} | {_fmt(o['held_out']):>29} | {_fmt(o['fit'])}")
    print(f"median of per-source held-out medians: {o['held_out_median_of_source_medians_pct']:.2f}%")
    print(f"worst held-out point: {o['held_out']['worst_point']}")
    for source, e in report["by_source"].items():
        if e["held_out"].get("n"):
            print(f"  worst {source}: {e['held_out']['worst_point']}")

    e2e = e2e_report(points, coeffs)
    print()
    print("End to end: real vLLM closed batches (B requests of L prompt + L output tokens), abs % error")
    print(
        f"{'configuration':34s} {'n':>4} {'makespan med':>12} {'p90':>6} {'worst':>6}"
        f" {'tok@B1 med':>10} {'TTFT':>6}"
    )

    def _row(name: str, v: dict[str, Any]) -> str:
        mk, pt, tt = v["makespan"], v["per_token_batch1"], v["ttft"]
        fmt = lambda e, k: f"{e[k]:.1f}%" if e.get("n") else "-"  # noqa: E731
        return (
            f"{name:34s} {mk.get('n', 0):>4} {fmt(mk, 'median_abs_pct'):>12} {fmt(mk, 'p90_abs_pct'):>6}"
            f" {fmt(mk, 'worst_abs_pct'):>6} {fmt(pt, 'median_abs_pct'):>10} {fmt(tt, 'median_abs_pct'):>6}"
        )

    for held in (True, False):
        print("HELD-OUT configurations (never fitted):" if held else "fitted configurations:")
        for cfg, v in e2e["configs"].items():
            if v["held_out"] == held:
                print("  " + _row(cfg.removesuffix("/vllm"), v))
        print(
            "  "
            + _row(
                "ALL " + ("held-out" if held else "fitted"), e2e["overall"]["held_out" if held else "fitted"]
            )
        )
    checks = e2e["tp_speedup_checks"]
    bad = [c for c in checks if not c["ok"]]
    print(
        f"TP speed-up: in {len(checks)} (model, GPU, L, B) cases the engine ran faster at TP 2/4 than"
        f" at TP 1; the model agrees in {len(checks) - len(bad)}"
    )
    print("batch-64 / batch-1 latency ratio on held-out configurations (measured vs model):")
    for r in e2e["batch64_ratios"]:
        if r["held_out"]:
            flag = "" if abs(r["error_pct"]) <= 10 else "  <-- outside 10%"
            print(
                f"  {r['config'].removesuffix('/vllm'):28s} L={r['length']:<5} {r['measured']:5.2f} vs"
                f" {r['model']:5.2f} ({r['error_pct']:+.1f}%){flag}"
            )

    a = anchors(coeffs)
    light = a["llama2_7b_h100_tp1_batch1_tpot_ms"]
    print()
    print(
        f"Anchor: Llama-2-7B, 1 x H100, batch 1: measured {LLAMA2_7B_H100_BATCH1_TPOT_MS} ms/token,"
        f" model {light['model_ms_ctx_192']} ms"
    )
    print(
        "Llama-3-8B, 1 x H100, decode step at context 1,000: "
        + ", ".join(
            f"{k.replace('_', ' ')}: {v:.1f} ms"
            for k, v in a["llama3_8b_h100_tp1_decode_ms_ctx_1000"].items()
        )
    )
    sar = a["sarathi_yi34b_tp2_a100_decode_ms"]
    print("Anchor: Sarathi-Serve Yi-34B TP2 A100-PCIe decode step (ms), context ~1,022:")
    print(f"  {'batch':>8} " + " ".join(f"{b:>6}" for b in SARATHI_DECODE_MS))
    print(f"  {'measured':>8} " + " ".join(f"{v:>6.1f}" for v in sar["measured_ms"]))
    print(f"  {'sarathi':>8} " + " ".join(f"{v:>6.1f}" for v in sar["model_sarathi_stack_ms"]))

    pm = get_perf_model("llama-3-8b", "h100", 1)
    print()
    print("Llama-3-8B, 1 x H100 (vllm stack; 'util' = useful-math share of the step):")
    for b in (1, 32, 128, 256):
        c = pm.decode(b, 1000)
        util = c.sm_busy_s / c.duration_s
        print(
            f"  decode B={b:<4} ctx 1000: {c.duration_s * 1e3:7.2f} ms  util {util:5.1%}"
            f"  host {c.overhead_s * 1e3:6.2f} ms  HBM {c.dram_bytes / 1e9:5.1f} GB"
        )
    for n in (512, 2048, 8192):
        c = pm.prefill(n)
        print(
            f"  prefill {n:<5} tokens: {c.duration_s * 1e3:7.2f} ms  util {c.sm_busy_s / c.duration_s:5.1%}"
            f"  host {c.overhead_s * 1e3:6.2f} ms"
        )
    for model, gpu, tp in (("llama-3-8b", "h100", 1), ("llama-2-70b", "a100", 4)):
        p = get_perf_model(model, gpu, tp)
        cs = cold_start(model, gpu, tp)
        print(
            f"{model} on {tp} x {p.gpu.name}: KV {p.kv_capacity_blocks()} blocks"
            f" = {p.kv_capacity_tokens()} tokens; cold start pending {cs.pending_s:.0f} s"
            f" + loading {cs.loading_s:.1f} s + warm-up {cs.warmup_s:.1f} s = {cs.total_s:.1f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
