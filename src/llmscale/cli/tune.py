"""``llmscale tune``: search a policy's parameters for the fewest GPU-hours at a target attainment."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli.backtest import print_sizing
from llmscale.cli.common import write_json
from llmscale.cli.options import (
    Calibration,
    ChunkedPrefill,
    Format,
    Gpu,
    GraceS,
    InitialReplicas,
    MaxNumBatchedTokens,
    MaxNumSeqs,
    MaxReplicas,
    MinReplicas,
    Model,
    RateScale,
    RateShape,
    Router,
    ScaleMode,
    Seed,
    SloTpotS,
    SloTtftPer1kTokensS,
    SloTtftS,
    TimeoutS,
    Tp,
    check_engine,
    check_fleet_options,
    load_policy_config,
    load_workload,
    workload_source,
)
from llmscale.cli.output import JsonOpt, json_console, make_console, write_output
from llmscale.deployment import DEFAULT_DEPLOYMENT
from llmscale.edge import check_distinct_paths, check_option, check_output_path
from llmscale.errors import ConfigError, LlmscaleError

__all__ = ["TUNE_HELP", "tune"]

TUNE_HELP = (
    "Search a policy's parameters for the fewest GPU-hours at a target SLO attainment (Optuna's TPE).\n\n"
    "Each trial backtests the policy on every --trace / --workload (the same simulated fleet and "
    "controller loop as `llmscale backtest`, with its options); GPU-hours add up over the traces and "
    "attainment counts all their requests. The search space comes from the policy's declared "
    "parameters (`llmscale policies`): x/÷4 around each positive default within its range, or "
    "--param NAME=LO:HI. The study lives in SQLite beside --out: rerun the same command to continue "
    "it. Writes the best trial as a --policy-config file and a page of all trials."
)


def tune(
    trace: Annotated[
        list[Path] | None,
        typer.Option(help="Request trace to tune on; repeat for several (any backtest format)."),
    ] = None,
    format: Format = "auto",
    workload: Annotated[
        list[str] | None,
        typer.Option("--workload", help="Built-in workload preset to tune on; repeat for several."),
    ] = None,
    policy: Annotated[str, typer.Option(help="The policy to tune (see `llmscale policies`).")] = "slo",
    param: Annotated[
        list[str] | None,
        typer.Option(
            help="Search only these parameters (repeat or comma-separate); NAME=LO:HI sets a window "
            "(needed for a parameter whose default is 0 or derived)."
        ),
    ] = None,
    trials: Annotated[
        int, typer.Option(help="Trials the study should have (a rerun runs only what is missing).")
    ] = 40,
    target_attainment: Annotated[
        float, typer.Option(help="SLO attainment a trial must reach to count (share of all requests).")
    ] = 0.99,
    out: Annotated[
        Path, typer.Option(help="Where to write the best trial as a --policy-config YAML.")
    ] = Path("tuned.yaml"),
    report: Annotated[
        Path | None, typer.Option(help="HTML page of the trials (default: beside --out, <name>-trials.html).")
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(help="Optuna storage: a SQLite file or a database URL (default: <out name>.optuna.db)."),
    ] = None,
    study_name: Annotated[
        str | None, typer.Option(help="Name of the study in the storage (default: the policy).")
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(help="Trials at once: local processes (default: CPU count), or Ray tasks with --ray."),
    ] = 0,
    ray: Annotated[
        str | None,
        typer.Option("--ray", help="Run trials as tasks on this existing Ray cluster (e.g. 10.0.0.5:6379)."),
    ] = None,
    min_replicas: MinReplicas = DEFAULT_DEPLOYMENT.min_replicas,
    max_replicas: MaxReplicas = None,
    initial_replicas: InitialReplicas = None,
    model: Model = DEFAULT_DEPLOYMENT.model,
    gpu: Gpu = DEFAULT_DEPLOYMENT.gpu,
    tp: Tp = DEFAULT_DEPLOYMENT.tp,
    rate_scale: RateScale = 1.0,
    scale_mode: ScaleMode = "users",
    start_s: Annotated[
        float | None, typer.Option(help="Start of the window to tune on (s from the first request).")
    ] = None,
    duration_s: Annotated[float | None, typer.Option(help="Length of the window to tune on (s).")] = None,
    rate_shape: RateShape = "smooth",
    slo_ttft_s: SloTtftS = DEFAULT_DEPLOYMENT.slo_ttft_s,
    slo_tpot_s: SloTpotS = DEFAULT_DEPLOYMENT.slo_tpot_s,
    slo_ttft_per_1k_tokens_s: SloTtftPer1kTokensS = DEFAULT_DEPLOYMENT.slo_ttft_per_1k_tokens_s,
    seed: Seed = 0,
    policy_config: Annotated[
        Path | None,
        typer.Option(
            help="YAML file: policy name -> {parameter: value}; the tuned policy's entry is the base."
        ),
    ] = None,
    timeout_s: TimeoutS = 60.0,
    grace_s: GraceS = 30.0,
    router: Router = "least-outstanding",
    calibration: Calibration = None,
    max_num_seqs: MaxNumSeqs = None,
    max_num_batched_tokens: MaxNumBatchedTokens = None,
    chunked_prefill: ChunkedPrefill = None,
    json_out: JsonOpt = None,
) -> None:
    # Help text: TUNE_HELP.
    from llmscale.backtest.runner import check_policies
    from llmscale.backtest.setup import FleetRequest, engine_settings
    from llmscale.policies.base import POLICIES, policy_names
    from llmscale.tune import (
        TuneCase,
        TuneSpec,
        default_storage,
        make_executor,
        parse_param_options,
        run_study,
        search_space,
        storage_url,
        write_outputs,
    )

    con = json_console(
        json_out,
        *(("--trace", t) for t in trace or []),
        ("--policy-config", policy_config),
        ("--calibration", calibration),
        ("--out", out),
    )
    err = make_console(stderr=True)
    check_fleet_options(
        replicas=None,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        initial_replicas=initial_replicas,
        tp=tp,
        slo_ttft_s=slo_ttft_s,
        slo_tpot_s=slo_tpot_s,
        timeout_s=timeout_s,
        grace_s=grace_s,
        router=router,
        jobs=jobs,
        slo_ttft_per_1k_tokens_s=slo_ttft_per_1k_tokens_s,
    )
    check_option("--trials", trials, "[1, 100000]", integer=True)
    check_option("--target-attainment", target_attainment, "(0, 1]")
    if policy not in policy_names():
        raise ConfigError(f"--policy {policy!r} is not a policy; known: {', '.join(policy_names())}")
    space = search_space(POLICIES[policy], parse_param_options(param or []))
    check_output_path("--out", out)
    report = report if report is not None else out.with_name(out.stem + "-trials.html")
    check_output_path("--report", report)
    # --storage as a file is a SQLite database Optuna writes: an output like the other two
    storage_file = None if storage is None or "://" in storage else Path(storage)
    check_distinct_paths(
        [("--out", out), ("--report", report), ("--storage", storage_file)],
        [
            *(("--trace", t) for t in trace or []),
            ("--policy-config", policy_config),
            ("--calibration", calibration),
        ],
    )
    store = storage_url(storage) if storage is not None else storage_url(str(default_storage(out)))
    params = load_policy_config(policy_config)
    sources: list[tuple[str, Path | None, str | None]] = [(str(t), t, None) for t in trace or []]
    sources += [(f"workload {p}", None, p) for p in workload or []]
    if not sources:
        raise ConfigError("give at least one --trace or --workload to tune on")
    engine = engine_settings(calibration, max_num_seqs, max_num_batched_tokens, chunked_prefill)
    check_engine(engine)
    cases = []
    for label, path, preset in sources:
        source = workload_source(
            path, format, preset, seed, start_s, duration_s, rate_scale, rate_shape, scale_mode=scale_mode
        )
        w = load_workload(source, seed, err)
        request = FleetRequest(
            model=model,
            gpu=gpu,
            tp=tp,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            initial_replicas=initial_replicas,
            static_replicas=0,
            slo_ttft_s=slo_ttft_s,
            slo_tpot_s=slo_tpot_s,
            slo_ttft_per_1k_tokens_s=slo_ttft_per_1k_tokens_s,
            seed=seed,
            timeout_s=timeout_s,
            grace_s=grace_s,
            router=router,
            engine=engine,
            calibration=None if calibration is None else str(calibration),
            policy_params=params,
        )
        settings = print_sizing(w, request, err)
        check_policies([policy], settings)
        cases.append(TuneCase(label, w, settings))
    spec = TuneSpec(
        policy=policy,
        target_attainment=target_attainment,
        trials=trials,
        storage=store,
        study_name=study_name or policy,
        seed=seed,
        base_params=params.get(policy, {}),
    )
    err.print(
        f"[dim]tuning {policy} on {len(cases)} trace(s) for the fewest GPU-hours at >= "
        f"{target_attainment:.2%} attainment; {len(space)} parameters: "
        + ", ".join(f"{p.name} {p.describe()}" for p in space)
        + f"; study {spec.study_name!r} in {store}[/]"
    )
    if jobs <= 0 and ray is None:
        jobs = os.cpu_count() or 1

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("trials"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[best]}"),
        TimeElapsedColumn(),
        console=err,
        disable=not err.is_terminal and "LLMSCALE_PROGRESS" not in os.environ,
    ) as bar:
        task = bar.add_task("trials", total=trials, best="")
        best: list[float] = []

        def on_trial(record: Any, finished: int) -> None:
            if record.feasible and record.gpu_hours is not None:
                best.append(record.gpu_hours)
            shown = f"best {min(best):.3f} GPU-h" if best else "no trial at the target yet"
            bar.update(task, completed=finished, best=shown)

        result = run_study(
            spec,
            space,
            cases,
            lambda: make_executor(policy, cases, jobs=jobs, ray_address=ray),
            on_trial=on_trial,
        )
    try:
        summary = write_outputs(result, out, report)
    except OSError as e:  # checked writable at the start; a full disk can still refuse at the end
        raise LlmscaleError(f"--out {out} / --report {report}: cannot write: {e.strerror or e}") from e
    con.print(summary.text, markup=False, highlight=False)
    if json_out is not None:
        from llmscale.outputs import tune_document

        tdoc = tune_document(result, out, report, summary.found)
        write_json("tune", tdoc, json_out, write_file=write_output)
    if not summary.found:
        raise typer.Exit(1)
