"""``llmscale calibrate``: fit the step-time model to an engine's own measurements."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli.common import write_json
from llmscale.cli.options import GPU_HELP, check_engine, prometheus_timeout
from llmscale.cli.output import JsonOpt, json_console, make_console, write_output
from llmscale.edge import check_distinct_paths, check_output_path
from llmscale.errors import ConfigError

__all__ = ["CALIBRATE_HELP", "calibrate"]

CALIBRATE_HELP = (
    "Fit a calibration profile of the step-time model to your engine's own measurements and print "
    "the error at every point.\n\n"
    "FILE is a closed-batch CSV (model,gpu,tp,input_tokens,output_tokens,batch_size,latency_s[,ttft_s], "
    "what `vllm bench latency` measures; the Argonne benchmark's columns work too) or the JSON of "
    "`vllm bench serve --save-result --save-detailed` (the per-request lengths and latencies); or give "
    "--prometheus URL --start --end to read a live fleet's "
    "inter-token latency against its running batch. Four factors scale the committed model "
    "(bandwidth, compute, host overheads, TP communication); use the profile with "
    "`backtest --calibration`, `emulate --calibration` or `target.calibration` in `run`'s config."
)


def calibrate(
    files: Annotated[
        list[Path] | None, typer.Argument(help="Closed-batch CSV or vllm bench serve JSON.")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Where to write the profile (YAML).")] = Path(
        "profile.yaml"
    ),
    model: Annotated[
        str | None, typer.Option(help="Model, where the file does not say (filters when it does).")
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="GPU, where the file does not say (filters when it does). " + GPU_HELP),
    ] = None,
    tp: Annotated[
        int | None, typer.Option(help="TP degree, where the file does not say (filters when it does).")
    ] = None,
    framework: Annotated[
        str | None, typer.Option(help="Engine rows to use from a multi-engine file (e.g. TensorRT-LLM).")
    ] = None,
    engine_name: Annotated[
        str, typer.Option(help="A name for the measured engine, kept in the profile.")
    ] = "",
    hold_out_lengths: Annotated[
        str,
        typer.Option(
            "--holdout",
            "--hold-out-lengths",
            help="Comma-separated prompt/output lengths to check but not fit, e.g. 256,1024: the "
            "error on them is reported, with a warning when it is worse than the committed model's.",
        ),
    ] = "",
    max_num_seqs: Annotated[
        int | None, typer.Option(help="The measured engine's max_num_seqs (default 256).")
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="The measured engine's token budget per iteration (default 8192).")
    ] = None,
    chunked_prefill: Annotated[
        bool | None,
        typer.Option(
            "--chunked-prefill/--no-chunked-prefill", help="Whether the measured engine chunks prompts."
        ),
    ] = None,
    prometheus: Annotated[str | None, typer.Option(help="Prometheus base URL of a live fleet.")] = None,
    start: Annotated[float | None, typer.Option(help="Range start (Unix seconds) for --prometheus.")] = None,
    end: Annotated[float | None, typer.Option(help="Range end (Unix seconds) for --prometheus.")] = None,
    step_s: Annotated[float, typer.Option(help="Range step (s) for --prometheus.")] = 60.0,
    window: Annotated[
        str, typer.Option(help="Rate window of the --prometheus queries (PromQL duration).")
    ] = "5m",
    selector: Annotated[
        str, typer.Option(help='Label matchers of the fleet\'s series for --prometheus, e.g. job="vllm".')
    ] = "",
    prometheus_selector: Annotated[
        str | None, typer.Option("--prometheus-selector", hidden=True, help="Deprecated: --selector.")
    ] = None,
    prometheus_timeout_s: Annotated[
        float, typer.Option(help="Deadline of each --prometheus query, the whole request (s).")
    ] = 30.0,
    json_out: JsonOpt = None,
) -> None:
    from rich.table import Table

    from llmscale.backtest.setup import engine_settings
    from llmscale.offline.calibrate import (
        SERVE_KINDS,
        calibrate,
        read_closed_batches,
        read_prometheus,
        read_serve_result,
    )
    from llmscale.offline.closed_batch import EngineSettings

    console = json_console(json_out, *(("FILE", f) for f in files or []))
    if prometheus_selector is not None:
        # one name per concept across commands (analyze and diagnose say --selector)
        if selector and selector != prometheus_selector:
            raise ConfigError("give --selector only (--prometheus-selector is its deprecated name)")
        make_console(stderr=True).print(
            "[bold yellow]warning:[/] --prometheus-selector is deprecated: use --selector", highlight=False
        )
        selector = prometheus_selector
    try:
        held = tuple(int(x) for x in hold_out_lengths.split(",") if x.strip())
    except ValueError:
        raise ConfigError(
            f"--hold-out-lengths = {hold_out_lengths!r}, must be integers separated by commas"
        ) from None
    given = engine_settings(None, max_num_seqs, max_num_batched_tokens, chunked_prefill)
    check_engine(given)
    engine = EngineSettings(
        max_num_seqs=given.max_num_seqs,
        max_num_batched_tokens=given.max_num_batched_tokens,
        chunked_prefill=given.chunked_prefill,
    )
    if chunked_prefill is False and max_num_batched_tokens is None:
        # vLLM V0 without chunked prefill: each model's budget is max(max_model_len, 2048)
        engine = EngineSettings(
            max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=0, chunked_prefill=False
        )
    if not files and prometheus is None:
        raise ConfigError("give one or more FILEs or --prometheus URL --start --end")
    check_output_path("--out", out)
    check_distinct_paths([("--out", out)], [("FILE", f) for f in files or []])
    targets = []
    sources = []
    inputs: list[dict[str, Any]] = []  # which file was read how (--json's "inputs")
    for f in files or []:
        if f.suffix.lower() == ".json":
            got = read_serve_result(f, model=model, gpu=gpu, tp=tp)
            kind = got[0].source_kind if got else "serve-detailed"
            console.print(f"{f}: {SERVE_KINDS[kind]}", highlight=False)
        else:
            with make_console(stderr=True).status(f"Replaying the closed batches of {f} on the simulator..."):
                got = read_closed_batches(
                    f, model=model, gpu=gpu, tp=tp, framework=framework, engine=engine, hold_out_lengths=held
                )
            kind = "closed-batch"
        targets += got
        inputs.append({"source": str(f), "kind": kind, "points": len(got)})
        sources.append(str(f))
    if prometheus is not None:
        if start is None or end is None or model is None or gpu is None or tp is None:
            raise ConfigError("--prometheus needs --start, --end, --model, --gpu and --tp")
        n_before = len(targets)
        targets += read_prometheus(
            prometheus,
            start_s=start,
            end_s=end,
            step_s=step_s,
            model=model,
            gpu=gpu,
            tp=tp,
            window=window,
            selector=selector,
            timeout_s=prometheus_timeout(prometheus_timeout_s),
        )
        inputs.append({"source": prometheus, "kind": "prometheus", "points": len(targets) - n_before})
        sources.append(prometheus)
    profile = calibrate(
        targets, engine=engine, engine_name=engine_name or framework or "unknown", sources=sources
    )
    table = Table(title=f"calibration: {len(targets)} points", show_lines=False)
    for col in ("point", "measured s", "model s", "calibrated s", "error", "fitted"):
        table.add_column(col, justify="left" if col == "point" else "right", overflow="fold")
    for p in profile.points:
        table.add_row(
            p.label,
            f"{p.measured_s:.4g}",
            f"{p.uncalibrated_s:.4g}",
            f"{p.predicted_s:.4g}",
            f"{p.error_pct:+.1f}%",
            "yes" if p.fitted else "held out",
        )
    console.print(table)
    import statistics

    fitted = [p for p in profile.points if p.fitted]
    held_out = [p for p in profile.points if not p.fitted]
    for title, group in (("fitted", fitted), ("held out", held_out)):
        if group:
            after = statistics.median(abs(p.error_pct) for p in group)
            before = statistics.median(abs(p.uncalibrated_s / p.measured_s - 1) * 100 for p in group)
            console.print(
                f"{title}: median |error| {after:.1f}% (uncalibrated {before:.1f}%) over {len(group)} points"
            )
    for name, value in profile.factors.items():
        u = profile.uncertainty.get(name)
        if u is None:
            console.print(f"factor {name} {value:.3f} (not fitted)")
            continue
        pm = f"+-{u['stderr'] * 100:.1f}%" if u["relative"] else f"+-{u['stderr']:.3f}"
        console.print(f"factor {name} {value:.3f} {pm}, determined by: {'; '.join(u['determined_by'])}")
    err = make_console(stderr=True)
    for note in profile.notes:
        if note.startswith("warning:"):
            err.print("[bold yellow]warning:[/]" + note[len("warning:") :], highlight=False)
        else:
            console.print(note, highlight=False)
    profile.save(out)
    console.print(f"profile: {out}")
    if json_out is not None:
        from llmscale.outputs import calibrate_document

        write_json("calibrate", calibrate_document(profile, out, inputs), json_out, write_file=write_output)
