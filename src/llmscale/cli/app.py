"""The ``llmscale`` Typer app: every command registered in the order ``--help`` lists them, and
:func:`main`, the console script, which turns an :class:`~llmscale.errors.LlmscaleError` into one
line on stderr and its exit code.

A command lives in its own module of this package (its signature and help); its work lives in
the library it calls. Registering a new command is one line here.
"""

from __future__ import annotations

import sys

import typer

from llmscale.cli import (
    analyze,
    backtest,
    calibrate,
    catalogue,
    emulate,
    loadgen,
    node_check,
    run,
    tenants,
    tune,
)
from llmscale.cli.common import CommonOptionsGroup
from llmscale.errors import LlmscaleError

__all__ = ["app", "main"]

app = typer.Typer(
    name="llmscale",
    help=(
        "SLO-aware autoscaling for LLM inference fleets (vLLM, TGI, Triton on Kubernetes).\n\n"
        "Prove a policy before deploying it: `llmscale backtest` replays a request trace on a "
        "calibrated, simulated fleet and compares autoscaling policies side by side against an "
        "oracle that knows the future."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # every command: --log-level, --log-format and LLMSCALE_<OPTION> variables (cli/common.py)
    cls=CommonOptionsGroup,
)

app.command("backtest", help=backtest.BACKTEST_HELP)(backtest.backtest)
app.command("tune", help=tune.TUNE_HELP)(tune.tune)
app.command("policies")(catalogue.policies)
app.command("workloads")(catalogue.workloads)
app.command("run", help=run.RUN_HELP)(run.run)
app.command("emulate", help=emulate.EMULATE_HELP)(emulate.emulate)
app.command("loadgen", help=loadgen.LOADGEN_HELP)(loadgen.loadgen)
app.command("calibrate", help=calibrate.CALIBRATE_HELP)(calibrate.calibrate)
app.command("analyze", help=analyze.ANALYZE_HELP)(analyze.analyze)
app.command("diagnose", help=analyze.DIAGNOSE_HELP)(analyze.diagnose)
app.command("tenants", help=tenants.TENANTS_HELP)(tenants.tenants)
app.command("node-check", help=node_check.NODE_CHECK_HELP)(node_check.node_check)


def main() -> None:
    try:
        app()
    except LlmscaleError as e:
        typer.echo(f"llmscale: error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        typer.echo("llmscale: interrupted", err=True)
        sys.exit(130)
