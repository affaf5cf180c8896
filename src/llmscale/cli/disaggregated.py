"""``llmscale backtest --disaggregated``: prefill and decode pools, each sized by its own controller."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from llmscale.cli.common import write_json
from llmscale.cli.output import write_output

__all__ = ["run_disaggregated_backtest"]


def run_disaggregated_backtest(
    w: Any,
    names: list[str],
    settings: Any,
    *,
    with_oracle: bool,
    json_out: str | None,
    decisions: Path | None,
    out: Any,
    err: Any,
) -> None:
    """Run each policy on the two pools of ``settings.disaggregated`` (and the two-pool oracle),
    print one row per policy with each pool's GPU-hours, and write the JSON and decision log."""
    from rich.table import Table

    from llmscale.backtest.compare import build_document
    from llmscale.backtest.disagg import run_disaggregated, run_disaggregated_oracle

    rows = []
    lines: list[str] = []
    for name in names:
        log = io.StringIO() if decisions is not None else None
        with err.status(f"Simulating {name} on the prefill and decode pools..."):
            rows.append(run_disaggregated(w, name, settings, decisions_out=log))
        if log is not None:
            lines.extend(log.getvalue().splitlines(keepends=True))
    oracle = None
    if with_oracle:
        with err.status("Searching the cheapest pair of constant pool sizes (two-pool oracle)..."):
            oracle = run_disaggregated_oracle(w, settings)

    link = settings.disaggregated.interconnect
    table = Table(title=f"Disaggregated backtest: {w.name} — prefill and decode pools over {link}")
    for col in ("Policy", "SLO attain.", "GPU hours", "prefill", "decode", "TTFT p99 s", "TPOT p99 s",
                "KV transfer p99 s"):  # fmt: skip
        table.add_column(col, justify="left" if col == "Policy" else "right")

    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    for label, r in [
        *((r.policy, r) for r in rows),
        *([("oracle (constant pools)", oracle)] if oracle else []),
    ]:
        s = r.summary
        att = s["slo_attainment"]
        table.add_row(
            label,
            "-" if att is None else f"{100 * att:.2f}%",
            f"{s['gpu_hours']:.3f}",
            f"{s['pools']['prefill']['gpu_hours']:.3f}",
            f"{s['pools']['decode']['gpu_hours']:.3f}",
            fmt(s["ttft_p99_s"], ".3g"),
            fmt(s["tpot_p99_s"], ".3g"),
            fmt(s["transfer_p99_s"], ".3g"),
        )
    out.print(table)
    if json_out is not None:
        doc = build_document(w, settings, [], None, with_series=False)
        doc["results"] = [r.as_json() for r in rows]
        doc["oracle"] = oracle.as_json() if oracle is not None else None
        write_json("backtest-disaggregated", doc, json_out, write_file=write_output)
        if json_out != "-":
            out.print(f"results: {json_out}")
    if decisions is not None:
        write_output(decisions, "".join(lines), "--decisions")
        out.print(f"decision log: {decisions} ({len(lines)} ticks)")
