#!/usr/bin/env python3
"""What-if probe behind the README's Mistral-7B residual: charge full per-query-head KV re-reads.

Usage::

    .venv/bin/python benchmarks/paged_decode_probe.py [CALIBRATION_DIR]

vLLM 0.4.3-0.6.3 ran sliding-window models (Mistral-7B-v0.1: a 4,096-token window) on the
XFormers backend, whose decode is the PagedAttention kernel: one thread block per *query* head,
each reading its KV head's blocks. With 32 query heads on 8 KV heads that is up to 4x the
cache's bytes per step, where the FlashAttention decode the other models used reads each KV
head once (the committed model charges a fitted share of 0.18 of those extra reads).

This prints, for every Mistral-7B configuration of Argonne's vLLM rows (all held out of the fit),
the makespan error of the committed model and of the same model with a re-read share of 1.
It changes nothing in the model: it is the measurement the README quotes for why the re-read
mechanism is not adopted (it mends H100 and breaks A100).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from llmscale.offline.calibration import argonne_rows  # noqa: E402
from llmscale.offline.closed_batch import EngineSettings, schedule  # noqa: E402
from llmscale.perf.catalogue import get_model  # noqa: E402
from llmscale.perf.coefficients import load_coefficients  # noqa: E402
from llmscale.perf.step_time import PerfModel  # noqa: E402

MODEL = "mistral-7b"


def _p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.9 * (len(s) - 1) + 0.5))]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else REPO.parent / "shared" / "data" / "calibration"
    csv = root / "argonne" / "e2e_batch_latency.csv"
    if not csv.is_file():
        print(f"calibration data not found at {csv}", file=sys.stderr)
        return 2
    committed = load_coefficients()
    stack = committed.stack(None)
    stacks = dict(committed.stacks)
    stacks[committed.default_stack] = dataclasses.replace(stack, gqa_kv_reread=1.0)
    paged = dataclasses.replace(committed, stacks=stacks)
    engine = EngineSettings.vllm_v0(get_model(MODEL).max_context_tokens)

    errs: dict[tuple[str, int], dict[str, list[float]]] = {}
    models: dict[tuple[str, int, str], PerfModel] = {}
    for model, gpu, tp, length, batch, latency in argonne_rows(csv):
        if model != MODEL:
            continue
        sched = schedule(model, gpu, tp, length, length, batch, engine)
        row = errs.setdefault((gpu, tp), {"committed": [], "paged": []})
        for name, coeffs in (("committed", committed), ("paged", paged)):
            pm = models.get((gpu, tp, name))
            if pm is None:
                pm = models[(gpu, tp, name)] = PerfModel(model, gpu, tp, coeffs)
            row[name].append(abs(sched.makespan_s(pm) / latency - 1.0) * 100.0)

    print(f"{MODEL} makespan abs % error, committed re-read share {stack.gqa_kv_reread:.2f} vs 1.0")
    print(f"{'gpu':<12}{'tp':>3}{'n':>4}   committed med / p90    re-read 1.0 med / p90")
    for (gpu, tp), row in sorted(errs.items()):
        c, p = row["committed"], row["paged"]
        print(
            f"{gpu:<12}{tp:>3}{len(c):>4}   {statistics.median(c):8.1f}% / {_p90(c):5.1f}%"
            f"    {statistics.median(p):8.1f}% / {_p90(p):5.1f}%"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
