"""``llmscale analyze`` and ``llmscale diagnose``: read a decision log or a live Prometheus range."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli.common import write_json
from llmscale.cli.options import prometheus_timeout
from llmscale.cli.output import JsonOpt, json_console, write_output
from llmscale.edge import check_distinct_paths, check_output_path
from llmscale.errors import ConfigError

__all__ = ["ANALYZE_HELP", "DIAGNOSE_HELP", "analyze", "diagnose"]

ANALYZE_HELP = (
    "Analyse a controller's decision log (`backtest --decisions`, `run`'s decision_log) or a live "
    "range read from Prometheus (--prometheus URL --start --end): the knee of P99 latency and of "
    "throughput against load per replica (the fleet's cliff), the entropy-bandwidth phase diagram "
    "with its load patterns (weighted DBSCAN), the effect of scale actions on P99 with a 95% "
    "confidence interval, and the latency predictors' errors. --report writes them as one HTML page; "
    "--policy-config-out writes the P99 knee as the cliff the capacity-model policies keep a margin "
    "from (a --policy-config file for backtest and run)."
)

DIAGNOSE_HELP = (
    "Print the ghost replicas (VRAM resident, compute near zero, no requests) and the tenant and "
    "model drift found in a decision log or a live range (--prometheus URL --start --end), one row "
    "per episode."
)


def _analysis_source(
    decisions: Path | None,
    policy: str | None,
    prometheus: str | None,
    start: float | None,
    end: float | None,
    step_s: float,
    selector: str,
    window: str,
    timeout_s: float = 30.0,
) -> Any:
    """The TickTable from a decision log or a Prometheus range (exactly one of the two)."""
    if (decisions is None) == (prometheus is None):
        raise ConfigError("give a DECISIONS file or --prometheus URL --start --end (one of the two)")
    if prometheus is not None:
        if start is None or end is None:
            raise ConfigError("--prometheus needs --start and --end (Unix seconds)")
        from llmscale.analyze.prometheus import read_prometheus_range

        return read_prometheus_range(
            prometheus,
            start_s=start,
            end_s=end,
            step_s=step_s,
            selector=selector,
            window=window,
            timeout_s=prometheus_timeout(timeout_s),
        )
    from llmscale.analyze.log import read_decision_log

    assert decisions is not None
    return read_decision_log(decisions, policy=policy)


_DecisionsArg = Annotated[
    Path | None, typer.Argument(help="Decision log: one JSON line per tick (backtest --decisions, run).")
]
_PolicyOpt = Annotated[
    str | None, typer.Option(help="Policy of a backtest log with several (default: the first).")
]
_PromOpt = Annotated[str | None, typer.Option(help="Prometheus base URL, instead of a decision log.")]
_StartOpt = Annotated[float | None, typer.Option(help="Range start (Unix seconds) for --prometheus.")]
_EndOpt = Annotated[float | None, typer.Option(help="Range end (Unix seconds) for --prometheus.")]
_StepOpt = Annotated[float, typer.Option(help="Range step (s) for --prometheus: one tick per step.")]
_SelectorOpt = Annotated[
    str, typer.Option(help='Label matchers of the fleet\'s vLLM series for --prometheus, e.g. job="vllm".')
]
_WindowOpt = Annotated[str, typer.Option(help="Rate window of the --prometheus queries (PromQL duration).")]
_PromTimeoutOpt = Annotated[
    float, typer.Option(help="Deadline of each --prometheus query, the whole request (s).")
]


def analyze(
    decisions: _DecisionsArg = None,
    report: Annotated[Path | None, typer.Option(help="Write the analyses as one HTML page.")] = None,
    policy: _PolicyOpt = None,
    prometheus: _PromOpt = None,
    start: _StartOpt = None,
    end: _EndOpt = None,
    step_s: _StepOpt = 15.0,
    selector: _SelectorOpt = "",
    window: _WindowOpt = "1m",
    prometheus_timeout_s: _PromTimeoutOpt = 30.0,
    effect_horizon_s: Annotated[
        float, typer.Option(help="Read a scale action's outcome this long after it (s): about a cold start.")
    ] = 180.0,
    predict_horizon_s: Annotated[
        float, typer.Option(help="How far ahead the predictors predict P99 (s).")
    ] = 60.0,
    policy_config_out: Annotated[
        Path | None,
        typer.Option(
            help="Write the P99 knee as cliff_rps_per_replica of slo and capacity-calibrated: a "
            "--policy-config file for backtest and run."
        ),
    ] = None,
    json_out: JsonOpt = None,
) -> None:
    from llmscale.analyze.analysis import AnalysisSettings, analyze_table
    from llmscale.analyze.report import CHART_IDS, summary_text

    if report is not None:
        check_output_path("--report", report)
    if policy_config_out is not None:
        check_output_path("--policy-config-out", policy_config_out)
    check_distinct_paths(
        [("--report", report), ("--policy-config-out", policy_config_out)], [("DECISIONS", decisions)]
    )
    console = json_console(
        json_out, ("DECISIONS", decisions), ("--report", report), ("--policy-config-out", policy_config_out)
    )
    for name, v in (("--effect-horizon-s", effect_horizon_s), ("--predict-horizon-s", predict_horizon_s)):
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(f"{name} = {v}: must be a finite number > 0")
    table = _analysis_source(
        decisions, policy, prometheus, start, end, step_s, selector, window, prometheus_timeout_s
    )
    settings = AnalysisSettings(effect_horizon_s=effect_horizon_s, predict_horizon_s=predict_horizon_s)
    result = analyze_table(table, settings)
    console.print(f"[bold]{table.policy}[/bold]: {len(table)} ticks from {table.source}", highlight=False)
    summaries = {cid: summary_text(result, cid) for cid in CHART_IDS}
    for cid, title in CHART_IDS.items():
        console.print(f"\n[bold]{title}[/bold]", highlight=False)
        console.print(summaries[cid], highlight=False, soft_wrap=True)
    if report is not None:
        from llmscale.analyze.report import render_analysis_report

        render_analysis_report(result, report)
        console.print(f"\nreport: {report}", highlight=False)
    if policy_config_out is not None:
        from llmscale.analyze.cliff_config import write_cliff_config

        if result.latency_knee is None:
            why = result.notes.get("knee", "no knee")
            raise ConfigError(f"--policy-config-out {policy_config_out}: no P99 knee to write: {why}")
        doc = write_cliff_config(policy_config_out, result.latency_knee.load, table.source)
        console.print(
            f"\npolicy config: {policy_config_out} (cliff_rps_per_replica "
            f"{result.latency_knee.load:.4g} for {', '.join(doc)})",
            highlight=False,
        )
    if json_out is not None:
        from llmscale.outputs import analyze_document

        adoc = analyze_document(result, summaries, report, policy_config_out)
        write_json("analyze", adoc, json_out, write_file=write_output)


def diagnose(
    decisions: _DecisionsArg = None,
    policy: _PolicyOpt = None,
    prometheus: _PromOpt = None,
    start: _StartOpt = None,
    end: _EndOpt = None,
    step_s: _StepOpt = 15.0,
    selector: _SelectorOpt = "",
    window: _WindowOpt = "1m",
    prometheus_timeout_s: _PromTimeoutOpt = 30.0,
    json_out: JsonOpt = None,
) -> None:
    from rich.table import Table

    from llmscale.analyze.diagnose import diagnose_table

    console = json_console(json_out, ("DECISIONS", decisions))

    table = _analysis_source(
        decisions, policy, prometheus, start, end, step_s, selector, window, prometheus_timeout_s
    )
    findings, unchecked = diagnose_table(table)
    out = Table(title=f"{table.policy}: {len(findings)} finding(s) over {len(table)} ticks")
    for col in ("finding", "from s", "to s", "ticks", "peak", "detail"):
        out.add_column(col, justify="left" if col in ("finding", "detail") else "right")
    for f in findings:
        out.add_row(f.kind, f"{f.start_s:.0f}", f"{f.end_s:.0f}", str(f.num_ticks), f"{f.peak:.3g}", f.detail)
    console.print(out)
    for u in unchecked:
        console.print(f"not checked: {u}", highlight=False)
    if json_out is not None:
        from llmscale.outputs import diagnose_document

        ddoc = diagnose_document(table, findings, unchecked)
        write_json("diagnose", ddoc, json_out, write_file=write_output)
