"""``llmscale node-check``: whether a node may take a replica, read now from Prometheus."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli.common import write_json
from llmscale.cli.output import write_output
from llmscale.edge import check_output_path
from llmscale.errors import ConfigError

__all__ = ["NODE_CHECK_HELP", "node_check"]

NODE_CHECK_HELP = (
    "The node checks, read now from Prometheus (node-exporter and cAdvisor): free memory "
    "> 2 GiB, CPU throttling < 10%, disk IO < 70%. Exit 0 when the node may take a replica, 1 if not."
)


def node_check(
    prometheus: Annotated[str, typer.Option(help="Prometheus base URL, e.g. http://prometheus:9090.")],
    node: Annotated[
        str, typer.Option(help='Label selector of the node\'s series, e.g. instance="10.0.0.5:9100".')
    ],
    window: Annotated[str, typer.Option(help="Rate window of the counters (PromQL duration).")] = "1m",
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json",
            help="Also write the JSON (printed on stdout in any case) to PATH; "
            "schema: src/llmscale/schemas/node-check.schema.json.",
        ),
    ] = None,
) -> None:
    from urllib.parse import urlparse

    from llmscale.tenancy.node_checks import check_node
    from llmscale.tenancy.node_metrics import read_node_sample

    url = urlparse(prometheus)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise ConfigError(f"--prometheus {prometheus!r}: must be an http(s) URL, e.g. http://prometheus:9090")
    if json_out not in (None, "-"):
        assert json_out is not None
        check_output_path("--json", Path(json_out))
    errors: list[str] = []
    sample = read_node_sample(prometheus, node, window=window, errors=errors)
    failed = check_node(sample)
    doc: dict[str, Any] = {"node": node, "readings": sample.as_json(), "failed": list(failed)}
    if errors:
        doc["errors"] = errors
    write_json("node-check", doc, "-")
    if json_out not in (None, "-"):
        assert json_out is not None
        write_json("node-check", doc, json_out, write_file=write_output)
    # 2: the node could not be checked (Prometheus unreachable or answering malformed), as for
    # any unreadable input; 1: it was checked and fails; a scale-up is held on either.
    if errors:
        raise typer.Exit(2)
    if failed:
        raise typer.Exit(1)
