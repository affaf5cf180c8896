#!/usr/bin/env python3
"""`llmscale calibrate` on every engine of the shared Argonne file, held out by whole lengths.

Usage::

    .venv/bin/python benchmarks/calibrate_engines.py [--per-tp] [--model llama-2-7b] [CALIBRATION_DIR]

For each engine other than vLLM (TensorRT-LLM, DeepSpeed-MII, llama.cpp) and each GPU it ran on,
fits a profile on the closed batches of lengths 128, 512 and 2,048 (TP 1, 2 and 4 together, or
one profile per TP with ``--per-tp``) plus the engine's TTFT point where the TTFT file has one,
and prints the median absolute error on the lengths 256 and 1,024 (never fitted) against the
committed model's, the TTFT error, the fitted factors and what the fit refused or left at its
prior. The engine settings are vLLM V1's defaults (what `calibrate` assumes without options).
CALIBRATION_DIR defaults to ``$LLMSCALE_SHARED_DATA/calibration`` or ``<repo>/../shared/data/calibration``.
"""

from __future__ import annotations

import os
import statistics
import sys
from contextlib import suppress
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from llmscale.errors import ConfigError, TraceFormatError  # noqa: E402
from llmscale.offline.calibrate import Target, calibrate, read_closed_batches  # noqa: E402
from llmscale.offline.closed_batch import EngineSettings  # noqa: E402

ENGINES = (
    ("TensorRT-LLM", ("a100-40gb", "h100", "gh200")),
    ("Deepspeed-MII", ("a100-40gb",)),
    ("llama.cpp", ("a100-40gb", "h100", "gh200")),
)
HELD_OUT_LENGTHS = (256, 1024)


def main(argv: list[str]) -> int:
    per_tp = "--per-tp" in argv
    model = argv[argv.index("--model") + 1] if "--model" in argv else "llama-2-7b"
    rest = [a for a in argv if not a.startswith("--") and a != model]
    shared = Path(os.environ.get("LLMSCALE_SHARED_DATA") or REPO.parent / "shared" / "data")
    root = Path(rest[0]) if rest else shared / "calibration"
    argonne = root / "argonne"
    engine = EngineSettings()
    print(f"model {model}; fitted on lengths 128/512/2048 (+ TTFT), held out {HELD_OUT_LENGTHS}")
    print(f"{'engine':14} {'gpu':10} {'tp':>3} {'held-out':>9} {'before':>8} {'ttft':>7}  factors (fitted)")
    for framework, gpus in ENGINES:
        for gpu in gpus:
            for tp in (1, 2, 4) if per_tp and gpu != "gh200" else (None,):
                targets: list[Target] = []
                for name in ("e2e_batch_latency.csv", "ttft_batch16_in1024.csv"):
                    with suppress(TraceFormatError):  # no TTFT row of this engine and GPU
                        targets += read_closed_batches(
                            argonne / name,
                            model=model,
                            gpu=gpu,
                            tp=tp,
                            framework=framework,
                            engine=engine,
                            hold_out_lengths=HELD_OUT_LENGTHS,
                        )
                tp_s = "all" if tp is None else str(tp)
                if not targets:
                    continue
                try:
                    prof = calibrate(targets, engine=engine, engine_name=framework, sources=[])
                except ConfigError as exc:
                    first = str(exc).splitlines()
                    print(f"{framework:14} {gpu:10} {tp_s:>3} refused: {first[0][:90]}")
                    for line in first[1:3]:
                        print(f"{'':30}{line.strip()[:120]}")
                    continue
                held = [p for p in prof.points if not p.fitted]
                after = statistics.median(abs(p.error_pct) for p in held)
                before = statistics.median(abs(p.uncalibrated_s / p.measured_s - 1) * 100 for p in held)
                ttft = [p for p in prof.points if p.label.endswith(" ttft")]
                ttft_s = f"{ttft[0].error_pct:+.1f}%" if ttft else "-"
                fitted = ", ".join(f"{k} {prof.factors[k]:.3g}" for k in prof.uncertainty)
                print(
                    f"{framework:14} {gpu:10} {tp_s:>3} {after:>8.1f}% {before:>7.1f}% {ttft_s:>7}  {fitted}"
                )
                for note in prof.notes:
                    if note.startswith("warning") or "edge of its range" in note:
                        print(f"{'':30}{note[:120]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
