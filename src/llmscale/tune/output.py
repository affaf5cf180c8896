"""What ``llmscale tune`` leaves behind: the best trial as a ``--policy-config`` file, the page of
the trials, and a few lines for the terminal."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmscale.tune.study import TuneResult, best_config

__all__ = ["TuneSummary", "write_outputs", "write_policy_config"]


@dataclass(frozen=True)
class TuneSummary:
    text: str
    #: whether some trial reached the target (and --out was written)
    found: bool


def write_policy_config(result: TuneResult, out: Path) -> bool:
    """Write the best trial to ``out`` as ``llmscale backtest --policy-config`` reads it; False
    (nothing written) when no trial reached the target. The document is checked with the same
    loader ``backtest`` uses before it is written, so a file tune writes is one backtest takes."""
    import yaml

    from llmscale.policies.config_file import check_policy_params
    from llmscale.report.page import write_page

    doc = best_config(result)
    best = result.best
    if doc is None or best is None:
        return False
    check_policy_params(doc)
    spec = result.spec
    header = (
        f"# llmscale tune: {spec.policy}, trial {best.number} of study {spec.study_name!r} ({spec.storage})\n"
        f"# on {', '.join(result.cases)}: {best.gpu_hours:.4f} GPU-hours at "
        f"{best.attainment:.4%} SLO attainment (target {spec.target_attainment:.2%})\n"
        f"# use: llmscale backtest --policy {spec.policy} --policy-config {out.name}\n"
    )
    write_page(out, header + yaml.safe_dump(doc, sort_keys=False))
    return True


def write_outputs(result: TuneResult, out: Path, report: Path) -> TuneSummary:
    """Write ``out`` (when a trial met the target) and the report; the terminal's summary."""
    from llmscale.tune.report import render_tune_report

    found = write_policy_config(result, out)
    render_tune_report(result, report)
    best, base = result.best, result.baseline
    lines = [
        f"{len(result.trials)} trials in study {result.spec.study_name!r} ({result.ran_now} run now)",
    ]
    if base is not None:
        lines.append(
            f"  defaults (trial {base.number}): {base.gpu_hours:.4f} GPU-hours at {base.attainment:.4%}"
        )
    if best is not None:
        lines.append(
            f"  best     (trial {best.number}): {best.gpu_hours:.4f} GPU-hours at {best.attainment:.4%}"
        )
        lines.append(
            "  "
            + ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in best.params.items()
            )
        )
        lines.append(f"policy config: {out}")
    else:
        lines.append(f"no trial reached {result.spec.target_attainment:.2%} attainment: {out} not written")
    failed = sum(t.state == "fail" for t in result.trials)
    if failed:
        lines.append(f"{failed} trial(s) failed: the report lists their errors")
    lines.append(f"report: {report}")
    return TuneSummary("\n".join(lines), found)
