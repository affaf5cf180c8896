"""``llmscale tenants``: backtest several models sharing a pool of MIG-partitioned GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmscale.cli.common import write_json
from llmscale.cli.output import write_output
from llmscale.edge import check_distinct_paths, check_output_path

__all__ = ["TENANTS_HELP", "tenants"]

TENANTS_HELP = (
    "Backtest several models sharing a pool of MIG-partitioned GPUs: each tenant's trace, model, "
    "MIG profile, policy and quota from CONFIG (see llmscale.backtest.tenants); scale-ups are admitted "
    "within the quota, the pool's free placements and the node checks (memory, CPU throttling, disk IO)."
)


def tenants(
    config: Annotated[Path, typer.Argument(help="YAML: pool (gpu, gpus, node, checks) and tenants.")],
    json_out: Annotated[
        str | None, typer.Option("--json", help="Write the results as JSON to PATH ('-' for stdout).")
    ] = None,
    decisions: Annotated[
        Path | None, typer.Option(help="Write one JSON line per tenant tick (with `admission`) to PATH.")
    ] = None,
) -> None:
    from llmscale.backtest.tenants import format_table, load_tenants, run_tenants

    if json_out not in (None, "-"):
        check_output_path("--json", Path(json_out))
    if decisions is not None:
        check_output_path("--decisions", decisions)
    check_distinct_paths(
        [("--json", None if json_out in (None, "-") else Path(json_out)), ("--decisions", decisions)],
        [("CONFIG", config)],
    )
    spec = load_tenants(config)
    # The tenants' traces are inputs too: known once the file is read, before anything is written.
    check_distinct_paths(
        [("--json", None if json_out in (None, "-") else Path(json_out)), ("--decisions", decisions)],
        [
            (f"tenants.{t.name}.workload.trace", Path(str(t.workload.meta["path"])))
            for t in spec.tenants
            if isinstance(t.workload.meta.get("path"), str)
        ],
    )
    if decisions is not None:
        with decisions.open("w", encoding="utf-8") as out:
            result = run_tenants(spec, decisions_out=out)
    else:
        result = run_tenants(spec)
    if json_out == "-":
        write_json("tenants", result.as_json(), "-")
        return
    typer.echo(format_table(result))
    if json_out is not None:
        write_json("tenants", result.as_json(), json_out, write_file=write_output)
