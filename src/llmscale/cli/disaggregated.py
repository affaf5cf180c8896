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
    with_reference: bool,
    json_out: str | None,
    decisions: Path | None,
    out: Any,
    err: Any,
) -> None:
    """Run each policy on the two pools of ``settings.disaggregated``, then the two-pool oracle
    and its causal reference (:func:`llmscale.backtest.fleet_yardsticks.disaggregated_yardsticks`,
    what the workload matrix's two-pool cell runs); print one row per policy with each pool's
    GPU-hours and its GPU-hours over the reference's, and write the JSON and decision log."""
    from rich.table import Table
    from rich.text import Text

    from llmscale.backtest.causal_reference import ReferenceSettings
    from llmscale.backtest.compare import build_document
    from llmscale.backtest.disagg import run_disaggregated
    from llmscale.backtest.fleet_yardsticks import (
        disaggregated_yardsticks,
        price_of_foresight,
        reference_ratio,
    )
    from llmscale.report._common import ORACLE_LABEL, REFERENCE_LABEL, foresight_text, judged_text

    rows = []
    lines: list[str] = []
    for name in names:
        log = io.StringIO() if decisions is not None else None
        with err.status(f"Simulating {name} on the prefill and decode pools..."):
            rows.append(run_disaggregated(w, name, settings, decisions_out=log))
        if log is not None:
            lines.extend(log.getvalue().splitlines(keepends=True))
    oracle = ref = None
    if with_oracle:
        what = "and its causal reference " if with_reference else ""
        with err.status(f"Searching the two-pool oracle {what}(schedules per pool)..."):
            reference = ReferenceSettings() if with_reference else None
            oracle, ref = disaggregated_yardsticks(w, settings, reference)

    doc = build_document(w, settings, [], None, with_series=False)
    pools = settings.disaggregated
    # the pools as they ran: their link, first sizes (given or sized) and bounds
    doc["config"]["disaggregated"] = {
        "interconnect": pools.interconnect,
        "prefill_initial_replicas": pools.prefill_initial_replicas,
        "decode_initial_replicas": pools.decode_initial_replicas,
        "prefill_max_replicas": pools.prefill_max_replicas,
        "decode_max_replicas": pools.decode_max_replicas,
    }
    doc["results"] = [r.as_json() for r in rows]
    doc["oracle"] = oracle.as_json() if oracle is not None else None
    if oracle is not None and ref is not None:
        # The single-pool document's fields: the reference's row (with ``pools``, and each pool's
        # schedule in ``reference_search``) and its GPU-hours over the oracle's.
        doc["causal_reference"] = ref.as_json()
        doc["price_of_foresight"] = price_of_foresight(oracle.summary, ref.summary, "gpu_hours")

    link = settings.disaggregated.interconnect
    table = Table(title=f"Disaggregated backtest: {w.name} — prefill and decode pools over {link}")
    # "feasible": over the requests some pool size can serve (the oracle and the reference are judged
    # on these, as on one pool); the headline column counts every request
    for col in ("Policy", "SLO attain.", "feasible", "GPU hours", "prefill", "decode", "x ref.",
                "TTFT p99 s", "TPOT p99 s", "KV transfer p99 s"):  # fmt: skip
        table.add_column(col, justify="left" if col == "Policy" else "right")

    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    labelled = [(r.policy, r) for r in rows]
    labelled += [(ORACLE_LABEL, oracle)] if oracle is not None else []
    labelled += [(REFERENCE_LABEL, ref)] if ref is not None else []
    for i, (label, r) in enumerate(labelled):
        if i == len(rows) and i > 0:
            table.add_section()  # the bounds under a rule: not ranked with the policies
        s = r.summary
        att, feasible = s["slo_attainment"], s.get("slo_attainment_feasible")
        table.add_row(
            label,
            "-" if att is None else f"{100 * att:.2f}%",
            "-" if feasible is None else f"{100 * feasible:.2f}%",
            f"{s['gpu_hours']:.3f}",
            f"{s['pools']['prefill']['gpu_hours']:.3f}",
            f"{s['pools']['decode']['gpu_hours']:.3f}",
            fmt(None if ref is None else reference_ratio(s, ref.summary, "gpu_hours"), ".2f"),
            fmt(s["ttft_p99_s"], ".3g"),
            fmt(s["tpot_p99_s"], ".3g"),
            fmt(s["transfer_p99_s"], ".3g"),
        )
    out.print(table)
    for line in (judged_text(doc), foresight_text(doc)):
        if line:
            out.print(Text(line, style="dim"))
    if json_out is not None:
        write_json("backtest-disaggregated", doc, json_out, write_file=write_output)
        if json_out != "-":
            out.print(f"results: {json_out}")
    if decisions is not None:
        write_output(decisions, "".join(lines), "--decisions")
        out.print(f"decision log: {decisions} ({len(lines)} ticks)")
