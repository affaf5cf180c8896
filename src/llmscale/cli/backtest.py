"""``llmscale backtest``: replay a workload on a simulated fleet under each policy, side by side."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli.common import write_json
from llmscale.cli.options import (
    AdaptiveBatch,
    BurstShare,
    Calibration,
    ChunkedPrefill,
    Dtype,
    Format,
    Gpu,
    GraceS,
    HbmGlitch,
    InitialReplicas,
    KvCacheDtype,
    Lengths,
    MaxNumBatchedTokens,
    MaxNumSeqs,
    MaxReplicas,
    MinReplicas,
    Model,
    Quantization,
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
    split_policies,
    workload_source,
)
from llmscale.cli.output import make_console, write_output
from llmscale.deployment import DEFAULT_DEPLOYMENT
from llmscale.edge import check_distinct_paths, check_option, check_output_path
from llmscale.errors import ConfigError, LlmscaleError

__all__ = ["BACKTEST_HELP", "backtest", "print_sizing"]

BACKTEST_HELP = (
    "Replay a workload on a simulated fleet under each policy; print the comparison and write a report.\n\n"
    "With no arguments: the embedded `default` workload (an hour shaped from the Azure conversation "
    "trace, with a daily-style ramp and a flash crowd) on Llama-3-8B / H100, the default policies plus "
    "the oracle, a table on the terminal and report.html."
)


def print_sizing(w: Any, request: Any, err: Any) -> Any:
    """:func:`llmscale.backtest.setup.sized_settings` of ``w``, telling the user on ``err`` what it
    found: requests touched by the loader, longer than the context or infeasible, and what one
    replica sustains. Returns its settings."""
    from rich.text import Text

    from llmscale.backtest.setup import needs_capacity_probe, sized_settings
    from llmscale.report.context import context_warning

    def on_context(clamped: int, context: Any) -> None:
        if clamped:
            # The loaders count a 0-token prompt or answer as 1 token (vLLM takes no empty prompt
            # and emits at least one token); the user should know the trace was touched, and how much.
            err.print(
                f"[dim]{clamped:,} of {w.num_requests:,} requests had 0 prompt or output tokens in the "
                "trace: replayed with 1 (an engine takes no empty prompt and returns at least one token)[/]"
            )
        message = context_warning(context.as_json())
        if message is not None:
            err.print(Text("warning: ", style="bold yellow") + Text(message))

    if needs_capacity_probe(request):
        with err.status("Measuring one replica's capacity on this workload..."):
            sizing = sized_settings(w, request, on_context)
    else:
        sizing = sized_settings(w, request, on_context)
    if sizing.prefill_past_ttft_target:
        err.print(
            f"[dim]{sizing.prefill_past_ttft_target:,} of {w.num_requests:,} requests cannot meet the "
            "TTFT target even on an idle replica (their prefill alone is longer): counted apart as "
            "infeasible, not sized for[/]"
        )
    if sizing.capacity_rps is not None:
        err.print(
            f"[dim]one replica sustains ~{sizing.capacity_rps:.2f} req/s within the SLO on this workload; "
            f"peak minute needs ~{sizing.peak_need} replicas[/]"
        )
    return sizing.settings


def _standby_sizes(text: str | None) -> list[int]:
    """``--standby-curve 0,4,8`` as integers, each in [0, 10000]."""
    if text is None:
        return []
    sizes = []
    for part in text.split(","):
        try:
            k = int(part.strip())
        except ValueError:
            raise ConfigError(f"--standby-curve {text!r}: {part.strip()!r} is not an integer") from None
        check_option("--standby-curve", k, "[0, 10000]", integer=True)
        sizes.append(k)
    return sizes


def backtest(
    trace: Annotated[
        Path | None,
        typer.Option(help="Request trace to replay (Azure/BurstGPT/plain CSV, Mooncake JSONL, ServeGen)."),
    ] = None,
    format: Format = "auto",
    workload: Annotated[
        str | None,
        typer.Option(
            "--workload", help="Built-in workload preset instead of a trace (see `llmscale workloads`)."
        ),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help="Policy to run; repeat or comma-separate. Default: slo, static and the peers people run "
            "today (HPA, KEDA, Knative, AIBrix, Ray Serve, Dynamo, llm-d WVA); 'all' adds every registered "
            "policy (see `llmscale policies`).",
        ),
    ] = None,
    replicas: Annotated[
        int | None,
        typer.Option(help="Replicas of the `static` policy (default: enough for the peak minute)."),
    ] = None,
    min_replicas: MinReplicas = DEFAULT_DEPLOYMENT.min_replicas,
    max_replicas: MaxReplicas = None,
    initial_replicas: InitialReplicas = None,
    model: Model = DEFAULT_DEPLOYMENT.model,
    gpu: Gpu = DEFAULT_DEPLOYMENT.gpu,
    tp: Tp = DEFAULT_DEPLOYMENT.tp,
    dtype: Dtype = DEFAULT_DEPLOYMENT.dtype,
    quantization: Quantization = DEFAULT_DEPLOYMENT.quantization,
    kv_cache_dtype: KvCacheDtype = DEFAULT_DEPLOYMENT.kv_cache_dtype,
    gpus: Annotated[
        str | None,
        typer.Option(
            help="GPU types of a mixed fleet, e.g. a100-80gb,h100-80gb,h200: the gpu-mix policy chooses the "
            "cheapest mix among them (--gpu must be one of them; the other policies scale --gpu)."
        ),
    ] = None,
    gpu_prices: Annotated[
        Path | None,
        typer.Option(
            help="YAML of prices per GPU-hour and max_gpus per type (docs/gpu-mix.md); default: the "
            "cited on-demand list prices, no limits."
        ),
    ] = None,
    history_from: Annotated[
        str | None,
        typer.Option(
            help="A trace or preset of the days before the run (as --trace or --workload take): seeds the "
            "same-hour rate history the eviction window and seasonal forecasts read (docs/history.md)."
        ),
    ] = None,
    history_period_s: Annotated[
        float, typer.Option(help="The history's period, s (86400: a day; shorter for a compressed day).")
    ] = 86400.0,
    rate_scale: RateScale = 1.0,
    scale_mode: ScaleMode = "users",
    lengths: Lengths = None,
    start_s: Annotated[
        float | None, typer.Option(help="Start of the window to replay (s from the first request).")
    ] = None,
    duration_s: Annotated[float | None, typer.Option(help="Length of the window to replay (s).")] = None,
    start_at: Annotated[
        str | None,
        typer.Option(
            help="Wall time of the run's first second, for the guards' schedule (ISO 8601, e.g. "
            "2026-03-02T07:00:00+01:00; default: the trace's first timestamp, else a Monday 00:00 UTC)."
        ),
    ] = None,
    rate_shape: RateShape = "smooth",
    burst_share: BurstShare = 0.0,
    hbm_glitch: HbmGlitch = None,
    adaptive_batch: AdaptiveBatch = False,
    slo_ttft_s: SloTtftS = DEFAULT_DEPLOYMENT.slo_ttft_s,
    slo_tpot_s: SloTpotS = DEFAULT_DEPLOYMENT.slo_tpot_s,
    slo_ttft_per_1k_tokens_s: SloTtftPer1kTokensS = DEFAULT_DEPLOYMENT.slo_ttft_per_1k_tokens_s,
    seed: Seed = 0,
    seeds: Annotated[
        int,
        typer.Option(
            help="Repeat over seeds --seed .. --seed+N-1 (a synthetic, rate-scaled or ServeGen workload is "
            "regenerated per seed; the simulator's draws always): mean and 95% interval of SLO attainment "
            "and GPU-hours, and which differences are within noise. 1..100."
        ),
    ] = 1,
    json_out: Annotated[
        str | None,
        typer.Option("--json", help="Write results as JSON to PATH ('-' for stdout: JSON only there)."),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(help="Write a self-contained HTML report (default report.html with no arguments)."),
    ] = None,
    decisions: Annotated[
        Path | None, typer.Option(help="Write one JSON line per controller tick to PATH.")
    ] = None,
    policy_config: Annotated[
        Path | None, typer.Option(help="YAML file: policy name -> {parameter: value}.")
    ] = None,
    oracle: Annotated[bool, typer.Option(help="Also run the oracle (lower bound on GPU-hours).")] = True,
    causal_reference: Annotated[
        bool,
        typer.Option(
            help="With the oracle: also run the causal reference, the oracle's schedule delayed by "
            "detection + start with headroom searched to its target (what a controller without "
            "foresight could reach); reference / oracle GPU-hours is the price of foresight."
        ),
    ] = True,
    timeout_s: TimeoutS = 60.0,
    grace_s: GraceS = 30.0,
    router: Router = "least-outstanding",
    jobs: Annotated[
        int, typer.Option(help="Policies simulated in parallel processes (default: CPU count).")
    ] = 0,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="Run each policy and seed as a task on this existing Ray cluster (e.g. 10.0.0.5:6379, "
            "or auto): the same results as a local run, on the cluster's CPUs (--jobs is then unused).",
        ),
    ] = None,
    calibration: Calibration = None,
    max_num_seqs: MaxNumSeqs = None,
    max_num_batched_tokens: MaxNumBatchedTokens = None,
    chunked_prefill: ChunkedPrefill = None,
    cold_start_s: Annotated[
        float | None,
        typer.Option(help="Cold start tier: total start of a new replica, s (default from the catalogue)."),
    ] = None,
    warm_node_start_s: Annotated[
        float | None,
        typer.Option(help="Warm-node tier: start on a kept node with image and weights cached, s."),
    ] = None,
    wake_s: Annotated[
        float | None,
        typer.Option(help="Sleeping tier: waking a replica from vLLM level-1 sleep, s."),
    ] = None,
    node_keep_s: Annotated[
        float, typer.Option(help="A node outlives its replica this long (warm-node starts), s; 0: never.")
    ] = 0.0,
    node_start_s: Annotated[
        float | None,
        typer.Option(
            help="Node pool: a start no kept node takes first waits this long for a new GPU node, s "
            "(node_pending; default: no node pool, every start finds a node)."
        ),
    ] = None,
    max_nodes: Annotated[
        int | None,
        typer.Option(
            help="Node pool: most nodes (one replica each, kept ones included); a start beyond waits "
            "node_pending until a node frees. Default: unbounded."
        ),
    ] = None,
    standby_replicas: Annotated[
        int | None,
        typer.Option(help="slo's standby pool of sleeping replicas (its standby_replicas parameter)."),
    ] = None,
    disaggregated: Annotated[
        bool,
        typer.Option(
            help="Separate prefill and decode pools joined by a KV transfer, each sized by its own "
            "controller (policies slo-disagg, dynamo-disagg, static, or any other per pool; "
            "docs/disaggregation.md)."
        ),
    ] = False,
    interconnect: Annotated[
        str, typer.Option(help="--disaggregated: the KV transfer's link: nvlink, infiniband or ethernet.")
    ] = "infiniband",
    prefill_replicas: Annotated[
        int | None,
        typer.Option(
            help="--disaggregated: the prefill pool's first size (default: with the decode pool's, the "
            "cheapest pair that serves the first 5 minutes)."
        ),
    ] = None,
    decode_replicas: Annotated[
        int | None,
        typer.Option(
            help="--disaggregated: the decode pool's first size (default: sized with the prefill pool's "
            "for the first 5 minutes)."
        ),
    ] = None,
    prefill_max_replicas: Annotated[
        int | None, typer.Option(help="--disaggregated: the prefill pool's bound (default --max-replicas).")
    ] = None,
    decode_max_replicas: Annotated[
        int | None, typer.Option(help="--disaggregated: the decode pool's bound (default --max-replicas).")
    ] = None,
    standby_curve: Annotated[
        str | None,
        typer.Option(
            help="Also run slo with each of these pool sizes (e.g. 0,4,8,16): the report's attainment / "
            "GPU-hours curve and the JSON's standby_curve."
        ),
    ] = None,
) -> None:
    # Help text: BACKTEST_HELP (typer keeps a docstring's line breaks).
    from dataclasses import replace

    from llmscale.backtest.calendar import run_start_unix_s
    from llmscale.backtest.causal_reference import ReferenceSettings
    from llmscale.backtest.compare import build_document, run_backtest_seeds, seed_label
    from llmscale.backtest.runner import check_policies
    from llmscale.backtest.seeds import MAX_SEEDS, add_seed_statistics
    from llmscale.backtest.setup import (
        FleetRequest,
        engine_settings,
        faults_from_text,
        with_faults,
        with_gpus_and_history,
        with_node_pool,
        with_standby_replicas,
        with_start_tiers,
    )
    from llmscale.guards import MAX_REPLICAS

    json_to_stdout = json_out == "-"
    out = make_console(stderr=json_to_stdout)
    err = make_console(stderr=True)
    no_args = trace is None and workload is None and report is None and json_out is None
    if no_args:
        report = Path("report.html")

    # Everything the user gave is checked here, before the first simulated second: a bad value
    # found after a half-minute run (an unwritable --json path) costs the whole run.
    check_fleet_options(
        replicas=replicas,
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
    if json_out is not None and not json_to_stdout:
        check_output_path("--json", Path(json_out))
    if report is not None:
        check_output_path("--report", report)
    if decisions is not None:
        check_output_path("--decisions", decisions)
    check_distinct_paths(
        [
            ("--json", None if json_out in (None, "-") else Path(json_out)),
            ("--report", report),
            ("--decisions", decisions),
        ],
        [
            ("--trace", trace),
            ("--policy-config", policy_config),
            ("--calibration", calibration),
            ("--gpu-prices", gpu_prices),
        ],
    )
    # a pool is part of the fleet: at most the fleet's bound (a million ran out of memory in 50 s)
    check_option("--standby-replicas", standby_replicas, f"[0, {max_replicas or MAX_REPLICAS}]", integer=True)
    if disaggregated:
        from llmscale.backtest.disagg import DISAGG_POLICIES
        from llmscale.policies.base import policy_names

        given = [n.strip() for p in policy or () for n in p.split(",") if n.strip()]
        names = given or list(DISAGG_POLICIES)
        unknown = [n for n in names if n not in DISAGG_POLICIES and n not in policy_names()]
        if unknown:
            raise ConfigError(
                f"--policy {unknown[0]!r} is not a policy; with --disaggregated: "
                f"{', '.join(DISAGG_POLICIES)} or any of `llmscale policies` per pool"
            )
    else:
        names = split_policies(policy)
    params = load_policy_config(policy_config)
    check_option("--seeds", seeds, f"[1, {MAX_SEEDS}]", integer=True)
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
        lengths=lengths,
    )
    w = load_workload(source, seed, err)
    faults = faults_from_text(hbm_glitch or (), adaptive_batch)
    engine = engine_settings(calibration, max_num_seqs, max_num_batched_tokens, chunked_prefill)
    check_engine(engine)

    request = FleetRequest(
        model=model,
        gpu=gpu,
        tp=tp,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        initial_replicas=initial_replicas,
        static_replicas=replicas if "static" in names else 0,
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
        dtype=dtype,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
    )
    # The other input files are read before the run is sized (seconds of capacity search): a bad
    # --history-from or --gpu-prices is refused at once, not after that work.
    history = None
    if history_from is not None:
        history_path = Path(history_from)
        history = load_workload(
            workload_source(
                history_path if history_path.exists() else None,
                "auto",
                None if history_path.exists() else history_from,
                seed,
                None,
                None,
                1.0,
                rate_shape,
                0.0,
            ),
            seed,
            err,
            quiet=True,
        )
    prices = None
    if gpu_prices is not None:
        from llmscale.mix.prices import load_gpu_prices

        prices = load_gpu_prices(gpu_prices)
    settings = print_sizing(w, request, err)
    curve_sizes = _standby_sizes(standby_curve)
    check_option("--node-keep-s", node_keep_s, "[0, 604800]")
    for option, value in (("--cold-start-s", cold_start_s), ("--warm-node-start-s", warm_node_start_s)):
        check_option(option, value, "[0, 86400]")
    check_option("--wake-s", wake_s, "[0, 86400]")
    settings = with_start_tiers(settings, cold_start_s, warm_node_start_s, wake_s, node_keep_s)
    check_option("--node-start-s", node_start_s, "[0, 86400]")
    check_option("--max-nodes", max_nodes, f"[1, {MAX_REPLICAS}]", integer=True)
    if max_nodes is not None and settings.initial_replicas > max_nodes:
        # The fleet an autoscaler starts with runs on nodes of the pool: more of them than the cap
        # is a contradiction, refused rather than simulated over it. (A `static` fleet is a fixed
        # size chosen for the comparison, warm from the start: its nodes are there, whatever the cap.)
        raise ConfigError(
            f"--max-nodes = {max_nodes} is below --initial-replicas = {settings.initial_replicas}: the "
            "fleet a backtest starts with runs on nodes of the pool"
        )
    settings = with_node_pool(settings, node_start_s, max_nodes)
    if standby_replicas is not None:
        settings = with_standby_replicas(settings, standby_replicas)
    # The faults join after sizing: the defaults are sized for the fleet as it runs when healthy.
    settings = with_faults(settings, faults)
    settings = replace(settings, start_unix_s=run_start_unix_s(w.meta, start_at, start_s or 0.0))
    settings = with_gpus_and_history(settings, gpus, prices, history, history_period_s)
    if disaggregated:
        from llmscale.cli.disaggregated import run_disaggregated_backtest
        from llmscale.sim.disagg import DisaggConfig

        if report is not None or seeds > 1 or ray is not None or standby_curve is not None:
            raise ConfigError(
                "--disaggregated writes the table, --json and --decisions; --report, --seeds, --ray and "
                "--standby-curve are for one aggregated pool"
            )
        for option, value in (
            ("--prefill-replicas", prefill_replicas),
            ("--decode-replicas", decode_replicas),
        ):
            check_option(option, value, f"[1, {MAX_REPLICAS}]", integer=True)
        pools = DisaggConfig(
            interconnect=interconnect,
            prefill_initial_replicas=prefill_replicas or 1,
            decode_initial_replicas=decode_replicas or 1,
            prefill_max_replicas=prefill_max_replicas,
            decode_max_replicas=decode_max_replicas,
        )
        settings = replace(settings, disaggregated=pools)
        if prefill_replicas is None or decode_replicas is None:
            from llmscale.backtest.disagg import initial_pools

            with err.status("Sizing both pools for the first 5 minutes (constant pairs, simulated)..."):
                p, d = initial_pools(w, settings)
            pools = replace(
                pools,
                prefill_initial_replicas=p if prefill_replicas is None else prefill_replicas,
                decode_initial_replicas=d if decode_replicas is None else decode_replicas,
            )
            settings = replace(settings, disaggregated=pools)
            sized = ", ".join(
                f"{n} {k}"
                for n, k, given in (("prefill", p, prefill_replicas), ("decode", d, decode_replicas))
                if given is None
            )
            err.print(
                f"first pool sizes: {sized} (the cheapest constant pair serving the first 5 minutes is "
                f"{p} + {d}); --prefill-replicas / --decode-replicas set them",
                highlight=False,
            )
        run_disaggregated_backtest(
            w,
            names,
            settings,
            with_oracle=oracle,
            with_reference=causal_reference,
            json_out=json_out,
            decisions=decisions,
            out=out,
            err=err,
        )
        return
    try:
        check_policies(names, settings)
    except ConfigError as e:
        # The message starts with the policy ("slo: ..." or "slo.replicas = ..."): name the file
        # only when the settings configure that policy.
        if policy_config is not None and any(str(e).startswith(n) for n in settings.policy_params):
            raise ConfigError(f"--policy-config {policy_config}: {e}") from e
        raise
    if jobs <= 0:
        jobs = os.cpu_count() or 1

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    end_s = float(w.duration_s)
    all_names = [*names, *(["oracle"] if oracle else [])]
    with Progress(
        TextColumn("{task.description:<16}"),
        BarColumn(),
        TextColumn("{task.fields[sim]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
        disable=not err.is_terminal and "LLMSCALE_PROGRESS" not in os.environ,
    ) as bar:
        labels = [seed_label(n, k, seeds) for k in range(seeds) for n in all_names]
        tasks = {n: bar.add_task(n, total=max(end_s, 1.0), sim="") for n in labels}

        def on_progress(name: str, t: float) -> None:
            if t == float("inf"):
                bar.update(tasks[name], completed=max(end_s, 1.0), sim="done")
            else:
                bar.update(tasks[name], completed=min(t, end_s), sim=f"t={t:,.0f}s")

        # Seeds after the first: the same sizing and bounds (measured on the first seed's
        # workload), so the runs of one seed differ from another's only by their draws.
        seed_list = [seed + k for k in range(seeds)]
        workloads = [w] + [load_workload(source, s, err, quiet=True) for s in seed_list[1:]]
        per_seed = [replace(settings, seed=s, sim=replace(settings.sim, seed=s)) for s in seed_list]
        reference = ReferenceSettings() if oracle and causal_reference else None
        # A mixed fleet's oracle and reference are each type's, the cheapest by cost: the
        # workload matrix's mixed cell's (backtest/fleet_yardsticks.py), run here after the
        # policies, one seed after another.
        mixed = bool(settings.gpus)
        runs = run_backtest_seeds(
            workloads,
            names,
            per_seed,
            include_oracle=oracle and not mixed,
            jobs=jobs,
            want_decisions=decisions is not None,
            on_progress=on_progress,
            ray_address=ray,
            reference=reference,
        )
        if oracle and mixed:
            from llmscale.backtest.fleet_yardsticks import mixed_yardsticks

            for k, (results_k, _, lines_k) in enumerate(runs):
                sink = io.StringIO() if decisions is not None else None
                yardstick = mixed_yardsticks(workloads[k], per_seed[k], reference, decisions_out=sink)
                extra = sink.getvalue().splitlines(keepends=True) if sink is not None else []
                runs[k] = (results_k, yardstick, [*lines_k, *extra])
                on_progress(seed_label("oracle", k, seeds), float("inf"))
        for label in labels:
            on_progress(label, float("inf"))
    # With several seeds, the rows, decision log and report series are the first seed's run,
    # each row with its statistics over all seeds.
    results, oracle_result, lines = runs[0]

    curve = None
    if curve_sizes:
        from llmscale.backtest.standby_curve import standby_curve as run_curve

        with err.status("Running slo over the standby pool sizes..."):
            curve = run_curve(w, settings, curve_sizes)

    def document(with_series: bool) -> dict[str, Any]:
        doc = build_document(w, settings, results, oracle_result, with_series=with_series)
        if curve is not None:
            doc["standby_curve"] = curve
        return add_seed_statistics(doc, seed_list, runs) if seeds > 1 else doc

    doc = document(False)
    from llmscale.report import comparison_view

    out.print(comparison_view(doc))
    if json_out is not None:
        write_json("backtest", doc, json_out, write_file=write_output)
        if not json_to_stdout:
            out.print(f"results: {json_out}")
    if decisions is not None:
        write_output(decisions, "".join(lines), "--decisions")
        out.print(f"decision log: {decisions} ({len(lines)} ticks)")
    if report is not None:
        from llmscale.report import render_report

        try:
            render_report(document(True), report)
        except OSError as e:
            raise LlmscaleError(f"--report {report}: cannot write: {e.strerror or e}") from e
        out.print(f"report: {report}")
