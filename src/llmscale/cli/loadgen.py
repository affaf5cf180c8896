"""``llmscale loadgen``: replay a trace's arrivals against an OpenAI-compatible endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmscale.cli.common import write_json
from llmscale.cli.options import BurstShare, Format, RateShape, ScaleMode, load_workload, workload_source
from llmscale.cli.output import make_console, write_output
from llmscale.edge import check_distinct_paths, check_option, check_output_path
from llmscale.errors import LlmscaleError

__all__ = ["LOADGEN_HELP", "loadgen"]

LOADGEN_HELP = (
    "Replay a trace's arrivals against an OpenAI-compatible endpoint with streaming requests and print "
    "TTFT / TPOT / E2E percentiles, bounded by --max-requests and --max-duration-s."
)


def loadgen(
    target: Annotated[str, typer.Option(help="Base URL of the server, e.g. http://127.0.0.1:8000.")],
    trace: Annotated[Path | None, typer.Option(help="Request trace (any backtest format).")] = None,
    format: Format = "auto",
    workload: Annotated[
        str | None, typer.Option("--workload", help="Built-in workload preset instead of a trace.")
    ] = None,
    rate_scale: Annotated[float, typer.Option(help="Multiply the arrival rate.")] = 1.0,
    scale_mode: ScaleMode = "users",
    start_s: Annotated[float | None, typer.Option(help="Start of the window to replay (s).")] = None,
    duration_s: Annotated[float | None, typer.Option(help="Length of the window to replay (s).")] = None,
    rate_shape: RateShape = "smooth",
    burst_share: BurstShare = 0.0,
    max_requests: Annotated[int, typer.Option(help="Send at most this many requests.")] = 1000,
    max_duration_s: Annotated[float, typer.Option(help="Stop the replay after this many seconds.")] = 300.0,
    concurrency_limit: Annotated[
        int | None, typer.Option(help="At most this many requests in flight.")
    ] = None,
    request_timeout_s: Annotated[
        float, typer.Option(help="Give up on one request after this long (s).")
    ] = 120.0,
    chat: Annotated[
        bool, typer.Option("--chat", help="Use /v1/chat/completions, not /v1/completions.")
    ] = False,
    model: Annotated[
        str | None, typer.Option(help="Model id to ask for (default: the first served).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for presets and rate scaling.")] = 0,
    json_out: Annotated[
        str | None,
        typer.Option("--json", help="Write the summary and every request as JSON to PATH ('-': stdout)."),
    ] = None,
) -> None:
    from dataclasses import asdict

    from llmscale.loadgen import run_loadgen
    from llmscale.loadgen.report import result_table

    json_to_stdout = json_out == "-"
    out = make_console(stderr=json_to_stdout)
    check_option("--max-requests", max_requests, "[1, inf)", integer=True)
    check_option("--max-duration-s", max_duration_s, "(0, inf)")
    check_option("--concurrency-limit", concurrency_limit, "[1, inf)", integer=True)
    check_option("--request-timeout-s", request_timeout_s, "(0, inf)")
    if json_out is not None and not json_to_stdout:
        check_output_path("--json", Path(json_out))
        check_distinct_paths([("--json", Path(json_out))], [("--trace", trace)])
    source = workload_source(
        trace,
        format,
        workload,
        seed,
        start_s,
        duration_s,
        rate_scale,
        rate_shape,
        burst_share,
        scale_mode=scale_mode,
    )
    w = load_workload(source, seed, make_console(stderr=True))
    result = run_loadgen(
        w,
        target,
        max_requests=max_requests,
        max_duration_s=max_duration_s,
        concurrency_limit=concurrency_limit,
        chat=chat,
        model=model,
        request_timeout_s=request_timeout_s,
    )
    out.print(result_table(result))
    for note in result.notes:
        out.print(f"[dim]{note}[/]")
    if json_out is not None:
        doc = {**result.as_json(), "requests": [asdict(r) for r in result.records]}
        write_json("loadgen", doc, json_out, write_file=write_output)
        if not json_to_stdout:
            out.print(f"results: {json_out}")
    if result.records and result.ok == 0:
        first = next((r.error for r in result.records if r.error), "")
        raise LlmscaleError(f"no request succeeded out of {len(result.records)}; first error: {first}")
