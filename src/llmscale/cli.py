"""The ``llmscale`` command line: wiring only; the work lives in the packages it calls."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli_common import CommonOptionsGroup, notice, write_json
from llmscale.deployment import DEFAULT_DEPLOYMENT
from llmscale.edge import check_distinct_paths, check_option, check_output_path
from llmscale.errors import ConfigError, LlmscaleError
from llmscale.perf.catalogue import GPUS

__all__ = ["app", "main"]

#: Every GPU the catalogue knows, for the --gpu options' help (llmscale.perf.catalogue.GPUS).
GPU_HELP = "GPU: " + ", ".join(GPUS) + " (or an alias, or a MIG slice gpu:profile)."

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
    # every command: --log-level, --log-format and LLMSCALE_<OPTION> variables (cli_common.py)
    cls=CommonOptionsGroup,
)


def _console(*, stderr: bool) -> Any:
    """A rich console; when output is not a terminal (a file, CI) use a wide page, not 80 columns."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=180 if wide else None)


#: run when --policy is not given: ours, what people run today, and the fixed-fleet baseline.
#: `--policy all` adds every policy of the design documents.
DEFAULT_POLICIES = (
    "slo",
    "static",
    "hpa-gpu-util",
    "keda-queue",
    "knative-kpa",
    "aibrix-apa",
    "ray-serve",
    "dynamo-sla",
    "wva-saturation",
)


def _split_policies(values: list[str] | None) -> list[str]:
    from llmscale.policies.base import policy_names

    names: list[str] = []
    for v in values or []:
        names.extend(p.strip() for p in v.split(",") if p.strip())
    if "all" in names:
        return policy_names()
    if not names:
        known = set(policy_names())
        return [p for p in DEFAULT_POLICIES if p in known]
    known = set(policy_names())
    for n in names:
        if n not in known:
            raise ConfigError(f"--policy {n!r} is not a policy; known: {', '.join(sorted(known))}, or 'all'")
    seen: list[str] = []
    for n in names:
        if n not in seen:
            seen.append(n)
    return seen


def _load_policy_config(path: Path | None) -> dict[str, dict[str, Any]]:
    if path is None:
        return {}
    from llmscale.policies.config_file import load_policy_config

    try:
        return load_policy_config(path)
    except ConfigError as e:
        raise ConfigError(f"--policy-config {e}") from e


_RATE_SHAPE_HELP = (
    "ServeGen traces: 'smooth' (rate continuous, piecewise linear, each 10-minute window's count kept) "
    "or 'step' (constant per window, jumping at its edges)."
)


def _load_workload(
    trace: Path | None,
    fmt: str,
    preset: str | None,
    seed: int,
    start_s: float | None,
    duration_s: float | None,
    rate_scale: float,
    rate_shape: str = "smooth",
    burst_share: float = 0.0,
    *,
    scale_mode: str = "users",
    lengths: str | None = None,
    quiet: bool = False,
) -> Any:
    from llmscale.workloads import entropy_bursts, load_trace, make_preset, window
    from llmscale.workloads import rate_scale as scale
    from llmscale.workloads.lengths import assumed_lengths_text, parse_lengths
    from llmscale.workloads.limits import MAX_SPAN_S
    from llmscale.workloads.servegen import RATE_SHAPES
    from llmscale.workloads.transform import SCALE_MODES, USERS_SHIFT_S

    err = _console(stderr=True)

    check_option("--seed", seed, "[0, inf)", integer=True)
    check_option("--start-s", start_s, "[0, inf)")
    # inf: to the end of the trace
    check_option("--duration-s", duration_s, "(0, inf]")
    check_option("--rate-scale", rate_scale, "(0, inf)")
    if rate_shape not in RATE_SHAPES:
        raise ConfigError(f"--rate-shape = {rate_shape!r}, must be one of {', '.join(RATE_SHAPES)}")
    if trace is not None and preset is not None:
        raise ConfigError("give either --trace or --workload, not both")
    if scale_mode not in SCALE_MODES:
        raise ConfigError(f"--scale-mode = {scale_mode!r}, must be one of {', '.join(SCALE_MODES)}")
    length_model = parse_lengths(lengths) if lengths is not None else None
    if trace is not None:
        try:
            w = load_trace(
                trace,
                fmt,
                seed=seed,
                start_s=start_s,
                duration_s=duration_s,
                max_span_s=MAX_SPAN_S,
                rate_shape=rate_shape,
                lengths=length_model,
            )
        except ConfigError as e:
            if length_model is not None and "servegen traces only" in str(e):
                raise ConfigError(
                    f"--lengths applies to rate-only traces (ServeGen client folders and rate files); "
                    f"{trace} carries its own lengths"
                ) from e
            raise
        # A rate-only trace has no lengths: say which were drawn (a reasoning model's clients
        # replayed with chat lengths look easy).
        assumed = assumed_lengths_text(w.meta.get("lengths"))
        if assumed and not quiet:
            how = "given by --lengths" if length_model is not None else "assumed; set them with --lengths"
            text = f"{trace}: the trace has no lengths: {assumed}, {how}"
            notice(err, f"[dim]{text}[/]", text)
    elif length_model is not None:
        raise ConfigError(
            "--lengths applies to rate-only traces (--trace of ServeGen files), not to --workload"
        )
    else:
        w = make_preset(preset or "default", seed=seed)
        if start_s is not None or duration_s is not None:
            w = window(w, start_s or 0.0, duration_s if duration_s is not None else w.duration_s + 1.0)
    if rate_scale != 1.0:
        try:
            w = scale(w, rate_scale, seed=seed, mode=scale_mode)
        except ConfigError as e:
            raise ConfigError(f"--rate-scale: {e}") from e
        if not quiet:
            what = (
                f"{rate_scale:g} x the users: independently time-shifted copies (+-{USERS_SHIFT_S:g} s)"
                if scale_mode == "users"
                else f"the same users, each burst {rate_scale:g} x larger"
            )
            if rate_scale < 1.0:
                what = "a random subset of the requests (both modes)"
            text = f"--rate-scale {rate_scale:g} --scale-mode {scale_mode}: {what}"
            notice(err, f"[dim]{text}[/]", text)
    check_option("--burst-share", burst_share, "[0, 1]")
    if burst_share > 0.0:
        w = entropy_bursts(w, seed, burst_share=burst_share)
    return w


_SCALE_MODE_HELP = (
    "How --rate-scale above 1 adds requests: 'users' (N x the users: independently time-shifted "
    "copies of the trace, +-60 s each) or 'burst' (the same users, each burst N x larger: every "
    "copy next to its original). See docs/scaling-traces.md."
)

_LENGTHS_HELP = (
    "Rate-only traces (ServeGen client folders and rate files): prompt and output lengths, "
    "prompt=MEAN[:CV],output=MEAN[:CV] tokens (lognormal; CV default 1.31), or m-large / m-small "
    "(ServeGen's published means). Default: the m-large means, printed."
)

_BURST_SHARE_HELP = (
    "High-entropy bursts (a Poisson-uniform burst mixture): this share of the requests (0: none) "
    "regrouped into 50 ms bursts at Poisson times (1 a second), each joining the burst nearest its "
    "own arrival."
)


def _fault_settings(hbm_glitch: list[str] | None, adaptive_batch: bool) -> dict[str, Any]:
    """SimConfig's fault fields from ``--hbm-glitch`` (repeatable) and ``--adaptive-batch``."""
    from llmscale.sim.faults import AdaptiveBatchConfig, parse_glitch

    glitches = tuple(parse_glitch(g) for g in hbm_glitch or ())
    return {"hbm_glitches": glitches, "adaptive_batch": AdaptiveBatchConfig() if adaptive_batch else None}


_HBM_GLITCH_HELP = (
    "HBM-bandwidth glitches (a periodic glitch train): START_S:DURATION_S[:REPLICA_SHARE[:RETAINED_SHARE]]; "
    "every 83 ms the oldest REPLICA_SHARE (1) of the replicas keep RETAINED_SHARE (8/128) of their "
    "memory bandwidth for 17 % of the period. Repeat for several windows."
)
_ADAPTIVE_BATCH_HELP = (
    "The adaptive batch fuse on every replica: below 16/128 of its bandwidth for more "
    "than 3 periods of 83 ms, max_num_seqs halves (down to 32); 4 healthy periods double it back."
)


def _write_output(path: Path, text: str, option: str) -> None:
    """Write an output file; a full disk or a vanished directory is an error naming the option.

    The paths were checked writable before the run, but a write can still fail at the end
    (ENOSPC: found with ``--json /dev/full``, which printed a traceback after the whole run).
    """
    try:
        path.write_text(text)
    except OSError as e:
        raise LlmscaleError(f"{option} {path}: cannot write: {e.strerror or e}") from e


def _engine_settings(
    calibration: Path | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    chunked_prefill: bool | None,
) -> dict[str, Any]:
    """Engine scheduler settings: the options given, else the profile's engine, else vLLM V1's defaults."""
    from llmscale.offline.closed_batch import EngineSettings

    recorded: dict[str, Any] = {}
    if calibration is not None:
        from llmscale.perf.profile import load_profile

        recorded = dict(load_profile(calibration).engine)
    default = EngineSettings()
    # `is None`, not `or`: an explicit 0 is an error below, not a request for the default.
    out = {
        "max_num_seqs": max_num_seqs
        if max_num_seqs is not None
        else int(recorded.get("max_num_seqs", default.max_num_seqs)),
        "max_num_batched_tokens": max_num_batched_tokens
        if max_num_batched_tokens is not None
        else int(recorded.get("max_num_batched_tokens", default.max_num_batched_tokens)),
        "chunked_prefill": bool(recorded.get("chunked_prefill", default.chunked_prefill))
        if chunked_prefill is None
        else chunked_prefill,
    }
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        if out[name] < 1:
            raise ConfigError(f"--{name.replace('_', '-')} = {out[name]}, must be >= 1")
    if out["chunked_prefill"] and out["max_num_batched_tokens"] < out["max_num_seqs"]:
        # vLLM refuses to start so: every running sequence needs a token of the budget each step.
        raise ConfigError(
            f"--max-num-batched-tokens = {out['max_num_batched_tokens']}, must be >= --max-num-seqs "
            f"({out['max_num_seqs']}) with chunked prefill, as vLLM requires"
        )
    return out


def _context_warning(w: Any, settings: Any, err: Any) -> Any:
    """Warn about requests longer than the model's context; return those a replica admits (for sizing).

    The backtest still replays every request (the long ones are rejected, as vLLM rejects
    them); only the defaults sized from the workload leave them out, so nobody is asked to
    pay replicas for requests no replica serves.
    """
    from llmscale.backtest.context_check import check_context, within_context
    from llmscale.report.context import context_warning

    clamped = int(w.meta.get("clamped_rows", 0) or 0)
    if clamped:
        # The loaders count a 0-token prompt or answer as 1 token (vLLM takes no empty prompt and
        # emits at least one token); the user should know the trace was touched, and how much.
        err.print(
            f"[dim]{clamped:,} of {w.num_requests:,} requests had 0 prompt or output tokens in the "
            "trace: replayed with 1 (an engine takes no empty prompt and returns at least one token)[/]"
        )
    check = check_context(w, settings.model, settings.gpu, settings.tp, settings.sim, settings.calibration)
    message = context_warning(check.as_json())
    if message is not None:
        from rich.text import Text

        err.print(Text("warning: ", style="bold yellow") + Text(message))
    return within_context(w, check)


def _feasible_for_sizing(w: Any, settings: Any, err: Any) -> Any:
    """The requests some fleet can serve within the SLO (for sizing); say how many cannot.

    The replay keeps every request; an infeasible one (over the context, or a prefill alone on
    an idle replica past its TTFT target) is counted apart, and nothing is sized for it.
    """
    from llmscale.backtest.feasibility import feasible_only, infeasible_summary

    slow = infeasible_summary(w, settings)["prefill_past_ttft_target"]
    if slow:
        err.print(
            f"[dim]{slow:,} of {w.num_requests:,} requests cannot meet the TTFT target even on an idle "
            "replica (their prefill alone is longer): counted apart as infeasible, not sized for[/]"
        )
    return feasible_only(w, settings)


def _with_start_tiers(
    base: Any,
    cold_start_s: float | None,
    warm_node_start_s: float | None,
    wake_s: float | None,
    node_keep_s: float,
) -> Any:
    """``base`` with the start tiers the user gave: a tier's total keeps the catalogue's split."""
    from dataclasses import replace

    check_option("--node-keep-s", node_keep_s, "[0, 604800]")
    sim = replace(base.sim, node_keep_s=node_keep_s)
    for option, value in (("--cold-start-s", cold_start_s), ("--warm-node-start-s", warm_node_start_s)):
        check_option(option, value, "[0, 86400]")
    check_option("--wake-s", wake_s, "[0, 86400]")
    if cold_start_s is not None:
        total = sim.pending_s + sim.loading_s + sim.warmup_s
        f = cold_start_s / total if total > 0 else 0.0
        sim = replace(
            sim, pending_s=sim.pending_s * f, loading_s=sim.loading_s * f, warmup_s=sim.warmup_s * f
        )
    if warm_node_start_s is not None:
        total = sim.warm_node_pending_s + sim.warm_node_loading_s + sim.warm_node_warmup_s
        f = warm_node_start_s / total if total > 0 else 0.0
        sim = replace(
            sim,
            warm_node_pending_s=sim.warm_node_pending_s * f,
            warm_node_loading_s=sim.warm_node_loading_s * f,
            warm_node_warmup_s=sim.warm_node_warmup_s * f,
        )
    if wake_s is not None:
        sim = replace(sim, wake_s=wake_s)
    return replace(base, sim=sim)


def _with_node_pool(base: Any, node_start_s: float | None, max_nodes: int | None) -> Any:
    """``base`` with the node pool the user asked for (``--node-start-s``, ``--max-nodes``), if any.

    The fleet an autoscaler starts with runs on nodes of the pool: more of them than
    ``--max-nodes`` is a contradiction, refused here rather than simulated over the cap. (A
    ``static`` fleet is a fixed size chosen for the comparison, warm from the start: its nodes are
    there, whatever the cap.)
    """
    from dataclasses import replace

    from llmscale.guards import MAX_REPLICAS

    check_option("--node-start-s", node_start_s, "[0, 86400]")
    check_option("--max-nodes", max_nodes, f"[1, {MAX_REPLICAS}]", integer=True)
    if max_nodes is not None and base.initial_replicas > max_nodes:
        raise ConfigError(
            f"--max-nodes = {max_nodes} is below --initial-replicas = {base.initial_replicas}: the "
            "fleet a backtest starts with runs on nodes of the pool"
        )
    return replace(base, sim=replace(base.sim, node_start_s=node_start_s, max_nodes=max_nodes))


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


def _check_backtest_options(
    *,
    replicas: int | None,
    min_replicas: int,
    max_replicas: int | None,
    initial_replicas: int | None,
    tp: int,
    slo_ttft_s: float,
    slo_tpot_s: float,
    timeout_s: float,
    grace_s: float,
    router: str,
    jobs: int,
    slo_ttft_per_1k_tokens_s: float = 0.0,
) -> None:
    """Every numeric option of ``backtest`` in its range, named as the user typed it."""
    from llmscale.guards import MAX_REPLICAS

    replicas_range = f"[0, {MAX_REPLICAS}]"
    # 0 is refused, not "leave static out": it ran one replica (issue 19); a fleet of none serves nothing
    check_option("--replicas", replicas, f"[1, {MAX_REPLICAS}]", integer=True)
    check_option("--min-replicas", min_replicas, replicas_range, integer=True)
    check_option("--max-replicas", max_replicas, f"[1, {MAX_REPLICAS}]", integer=True)
    check_option("--initial-replicas", initial_replicas, replicas_range, integer=True)
    if max_replicas is not None and max_replicas < min_replicas:
        raise ConfigError(f"--max-replicas = {max_replicas}, must be >= --min-replicas ({min_replicas})")
    if initial_replicas is not None and not (
        min_replicas <= initial_replicas <= (max_replicas if max_replicas is not None else MAX_REPLICAS)
    ):
        raise ConfigError(
            f"--initial-replicas = {initial_replicas}, must be within --min-replicas ({min_replicas}) "
            f"and --max-replicas ({max_replicas if max_replicas is not None else MAX_REPLICAS})"
        )
    if tp not in (1, 2, 4, 8):
        raise ConfigError(f"--tp = {tp}, must be 1, 2, 4 or 8")
    check_option("--slo-ttft-s", slo_ttft_s, "(0, inf)")
    check_option("--slo-tpot-s", slo_tpot_s, "(0, inf)")
    check_option("--slo-ttft-per-1k-tokens-s", slo_ttft_per_1k_tokens_s, "[0, inf)")
    # inf: clients never give up / draining replicas are never killed
    check_option("--timeout-s", timeout_s, "(0, inf]")
    check_option("--grace-s", grace_s, "[0, inf]")
    if router not in ROUTERS:
        raise ConfigError(f"--router {router!r}, must be one of {', '.join(ROUTERS)}")
    check_option("--jobs", jobs, "[0, 1024]", integer=True)


#: how the gateway may spread requests (SimConfig's routers)
ROUTERS = ("least-outstanding", "round-robin")


def _sized_settings(
    w: Any,
    err: Any,
    *,
    model: str,
    gpu: str,
    tp: int,
    min_replicas: int,
    max_replicas: int | None,
    initial_replicas: int | None,
    static_replicas: int | None,
    slo_ttft_s: float,
    slo_tpot_s: float,
    slo_ttft_per_1k_tokens_s: float,
    seed: int,
    sim_options: dict[str, Any],
    engine: dict[str, Any],
    calibration: Path | None,
    params: dict[str, dict[str, Any]],
) -> Any:
    """The BacktestSettings of workload ``w``: bounds and initial fleet sized from what one replica
    sustains on its lengths where the options leave them open (``backtest`` and ``tune``).

    ``static_replicas``: None sizes the ``static`` policy for the peak minute, 0 leaves it out.
    """
    from dataclasses import replace

    from llmscale.backtest.runner import BacktestSettings, build_fleet
    from llmscale.backtest.sizing import replica_capacity_rps, replicas_for_rate
    from llmscale.sim.config import SimConfig

    sim = SimConfig(seed=seed, **sim_options, **engine)
    base = BacktestSettings(
        model=model,
        gpu=gpu,
        tp=tp,
        min_replicas=min_replicas,
        max_replicas=min_replicas,
        initial_replicas=min_replicas,
        slo_ttft_s=slo_ttft_s,
        slo_tpot_s=slo_tpot_s,
        slo_ttft_per_1k_tokens_s=slo_ttft_per_1k_tokens_s,
        seed=seed,
        sim=sim,
        calibration=None if calibration is None else str(calibration),
    ).with_cold_start()

    # Size the defaults from what one replica sustains on this workload's lengths, counting
    # only the requests a replica admits (`sized`; the replay itself keeps every request).
    _context_warning(w, base, err)
    sized = _feasible_for_sizing(w, base, err)
    need_auto = static_replicas is None or max_replicas is None or initial_replicas is None
    summary = sized.summary()
    if need_auto:
        # Only the probe's performance model is needed: a fleet built for the whole workload
        # (~15 MB of per-request arrays) must not outlive this, or every worker process and
        # every oracle trial forked later carries a copy of its pages.
        perf = build_fleet(sized, base, 0).perf
        with err.status("Measuring one replica's capacity on this workload..."):
            cap = replica_capacity_rps(
                perf,
                base.sim,
                sized.input_tokens,
                sized.output_tokens,
                slo_ttft_s,
                slo_tpot_s,
                seed=seed,
                slo_ttft_per_1k_tokens_s=slo_ttft_per_1k_tokens_s,
            )
        peak_need = replicas_for_rate(float(summary["peak_1min_rps"]), cap)
        first = sized.arrival_s < min(300.0, sized.duration_s + 1.0)
        first_rate = float(first.sum()) / min(300.0, max(sized.duration_s, 1.0))
        err.print(
            f"[dim]one replica sustains ~{cap:.2f} req/s within the SLO on this workload; "
            f"peak minute needs ~{peak_need} replicas[/]"
        )
    if max_replicas is None:
        max_replicas = max(64, 2 * peak_need, min_replicas)
    if initial_replicas is None:
        initial_replicas = min(max_replicas, max(min_replicas, replicas_for_rate(first_rate * 1.1, cap)))
    if static_replicas is None:
        static_replicas = peak_need
    if static_replicas:
        params.setdefault("static", {}).setdefault("replicas", static_replicas)
    return replace(base, max_replicas=max_replicas, initial_replicas=initial_replicas, policy_params=params)


BACKTEST_HELP = (
    "Replay a workload on a simulated fleet under each policy; print the comparison and write a report.\n\n"
    "With no arguments: the embedded `default` workload (an hour shaped from the Azure conversation "
    "trace, with a daily-style ramp and a flash crowd) on Llama-3-8B / H100, the default policies plus "
    "the oracle, a table on the terminal and report.html."
)


@app.command(help=BACKTEST_HELP)
def backtest(
    trace: Annotated[
        Path | None,
        typer.Option(help="Request trace to replay (Azure/BurstGPT/plain CSV, Mooncake JSONL, ServeGen)."),
    ] = None,
    format: Annotated[
        str, typer.Option("--format", help="Trace format: auto, azure, mooncake, burstgpt, servegen, csv.")
    ] = "auto",
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
    min_replicas: Annotated[
        int, typer.Option(help="Lower bound for autoscaling policies.")
    ] = DEFAULT_DEPLOYMENT.min_replicas,
    max_replicas: Annotated[
        int | None, typer.Option(help="Upper bound (default: max(64, 2 x the peak minute's need)).")
    ] = None,
    initial_replicas: Annotated[
        int | None, typer.Option(help="Ready replicas at time 0 (default: enough for the first 5 minutes).")
    ] = None,
    model: Annotated[
        str, typer.Option(help="Model: short name (llama-3-8b) or Hugging Face id.")
    ] = DEFAULT_DEPLOYMENT.model,
    gpu: Annotated[str, typer.Option(help=GPU_HELP)] = DEFAULT_DEPLOYMENT.gpu,
    tp: Annotated[
        int, typer.Option(help="Tensor-parallel GPUs per replica: 1, 2, 4 or 8.")
    ] = DEFAULT_DEPLOYMENT.tp,
    rate_scale: Annotated[
        float, typer.Option(help="Multiply the arrival rate, keeping the trace's duration and shape.")
    ] = 1.0,
    scale_mode: Annotated[str, typer.Option(help=_SCALE_MODE_HELP)] = "users",
    lengths: Annotated[str | None, typer.Option(help=_LENGTHS_HELP)] = None,
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
    rate_shape: Annotated[str, typer.Option(help=_RATE_SHAPE_HELP)] = "smooth",
    burst_share: Annotated[float, typer.Option(help=_BURST_SHARE_HELP)] = 0.0,
    hbm_glitch: Annotated[list[str] | None, typer.Option(help=_HBM_GLITCH_HELP)] = None,
    adaptive_batch: Annotated[bool, typer.Option(help=_ADAPTIVE_BATCH_HELP)] = False,
    slo_ttft_s: Annotated[
        float, typer.Option(help="SLO on time to first token (s).")
    ] = DEFAULT_DEPLOYMENT.slo_ttft_s,
    slo_tpot_s: Annotated[
        float, typer.Option(help="SLO on mean time per output token after the first (s).")
    ] = DEFAULT_DEPLOYMENT.slo_tpot_s,
    slo_ttft_per_1k_tokens_s: Annotated[
        float,
        typer.Option(
            help="Length-aware TTFT SLO: this many more seconds per 1,000 prompt tokens "
            "(target = --slo-ttft-s + this x prompt / 1000)."
        ),
    ] = DEFAULT_DEPLOYMENT.slo_ttft_per_1k_tokens_s,
    seed: Annotated[int, typer.Option(help="Seed for every random draw; same seed, same results.")] = 0,
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
    timeout_s: Annotated[
        float, typer.Option(help="A client gives up after this long without a first token (s).")
    ] = 60.0,
    grace_s: Annotated[
        float, typer.Option(help="Grace period of a draining replica before it is killed (s).")
    ] = 30.0,
    router: Annotated[
        str, typer.Option(help="How the gateway spreads requests: least-outstanding or round-robin.")
    ] = "least-outstanding",
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
    calibration: Annotated[
        Path | None,
        typer.Option(
            help="Calibration profile from `llmscale calibrate`: the step-time model of your engine."
        ),
    ] = None,
    max_num_seqs: Annotated[
        int | None, typer.Option(help="Engine: most sequences in one batch (vLLM's; default 256).")
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="Engine: token budget of one iteration (default 8192).")
    ] = None,
    chunked_prefill: Annotated[
        bool | None,
        typer.Option(
            "--chunked-prefill/--no-chunked-prefill",
            help="Engine: split prompts into chunks that share iterations with decodes (vLLM V1: on).",
        ),
    ] = None,
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

    from llmscale.backtest.causal_reference import ReferenceSettings
    from llmscale.backtest.compare import build_document, run_backtest_seeds, seed_label
    from llmscale.backtest.runner import check_policies
    from llmscale.backtest.seeds import MAX_SEEDS, add_seed_statistics
    from llmscale.guards import MAX_REPLICAS

    json_to_stdout = json_out == "-"
    console = _console(stderr=json_to_stdout)
    err = _console(stderr=True)
    no_args = trace is None and workload is None and report is None and json_out is None
    if no_args:
        report = Path("report.html")

    # Everything the user gave is checked here, before the first simulated second: a bad value
    # found after a half-minute run (an unwritable --json path) costs the whole run.
    _check_backtest_options(
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
        [("--trace", trace), ("--policy-config", policy_config), ("--calibration", calibration)],
    )
    # a pool is part of the fleet: at most the fleet's bound (a million ran out of memory in 50 s)
    check_option("--standby-replicas", standby_replicas, f"[0, {max_replicas or MAX_REPLICAS}]", integer=True)
    names = _split_policies(policy)
    params = _load_policy_config(policy_config)
    check_option("--seeds", seeds, f"[1, {MAX_SEEDS}]", integer=True)
    w = _load_workload(
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
    faults = _fault_settings(hbm_glitch, adaptive_batch)

    settings = _sized_settings(
        w,
        err,
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
        sim_options={"timeout_s": timeout_s, "grace_s": grace_s, "router": router},
        engine=_engine_settings(calibration, max_num_seqs, max_num_batched_tokens, chunked_prefill),
        calibration=calibration,
        params=params,
    )
    curve_sizes = _standby_sizes(standby_curve)
    settings = _with_start_tiers(settings, cold_start_s, warm_node_start_s, wake_s, node_keep_s)
    settings = _with_node_pool(settings, node_start_s, max_nodes)
    if standby_replicas is not None:
        params.setdefault("slo", {})["standby_replicas"] = standby_replicas
        settings = replace(settings, policy_params=params)
    # The faults join after sizing: the defaults are sized for the fleet as it runs when healthy.
    settings = replace(settings, sim=replace(settings.sim, **faults))
    from llmscale.backtest.calendar import run_start_unix_s

    settings = replace(settings, start_unix_s=run_start_unix_s(w.meta, start_at, start_s or 0.0))
    try:
        check_policies(names, settings)
    except ConfigError as e:
        # The message starts with the policy ("slo: ..." or "slo.replicas = ..."): name the file
        # only when the file configures that policy.
        if policy_config is not None and any(str(e).startswith(n) for n in params):
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
        workloads = [w] + [
            _load_workload(
                trace,
                format,
                workload,
                s,
                start_s,
                duration_s,
                rate_scale,
                rate_shape,
                burst_share,
                scale_mode=scale_mode,
                lengths=lengths,
                quiet=True,
            )
            for s in seed_list[1:]
        ]
        per_seed = [replace(settings, seed=s, sim=replace(settings.sim, seed=s)) for s in seed_list]
        runs = run_backtest_seeds(
            workloads,
            names,
            per_seed,
            include_oracle=oracle,
            jobs=jobs,
            want_decisions=decisions is not None,
            on_progress=on_progress,
            ray_address=ray,
            reference=ReferenceSettings() if oracle and causal_reference else None,
        )
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

    console.print(comparison_view(doc))
    if json_out is not None:
        write_json("backtest", doc, json_out, write_file=_write_output)
        if not json_to_stdout:
            console.print(f"results: {json_out}")
    if decisions is not None:
        _write_output(decisions, "".join(lines), "--decisions")
        console.print(f"decision log: {decisions} ({len(lines)} ticks)")
    if report is not None:
        from llmscale.report import render_report

        try:
            render_report(document(True), report)
        except OSError as e:
            raise LlmscaleError(f"--report {report}: cannot write: {e.strerror or e}") from e
        console.print(f"report: {report}")


TUNE_HELP = (
    "Search a policy's parameters for the fewest GPU-hours at a target SLO attainment (Optuna's TPE).\n\n"
    "Each trial backtests the policy on every --trace / --workload (the same simulated fleet and "
    "controller loop as `llmscale backtest`, with its options); GPU-hours add up over the traces and "
    "attainment counts all their requests. The search space comes from the policy's declared "
    "parameters (`llmscale policies`): x/÷4 around each positive default within its range, or "
    "--param NAME=LO:HI. The study lives in SQLite beside --out: rerun the same command to continue "
    "it. Writes the best trial as a --policy-config file and a page of all trials."
)


@app.command("tune", help=TUNE_HELP)
def tune_cmd(
    trace: Annotated[
        list[Path] | None,
        typer.Option(help="Request trace to tune on; repeat for several (any backtest format)."),
    ] = None,
    format: Annotated[
        str, typer.Option("--format", help="Trace format: auto, azure, mooncake, burstgpt, servegen, csv.")
    ] = "auto",
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
    min_replicas: Annotated[
        int, typer.Option(help="Lower bound for autoscaling policies.")
    ] = DEFAULT_DEPLOYMENT.min_replicas,
    max_replicas: Annotated[
        int | None, typer.Option(help="Upper bound (default: max(64, 2 x the peak minute's need)).")
    ] = None,
    initial_replicas: Annotated[
        int | None, typer.Option(help="Ready replicas at time 0 (default: enough for the first 5 minutes).")
    ] = None,
    model: Annotated[
        str, typer.Option(help="Model: short name (llama-3-8b) or Hugging Face id.")
    ] = DEFAULT_DEPLOYMENT.model,
    gpu: Annotated[str, typer.Option(help=GPU_HELP)] = DEFAULT_DEPLOYMENT.gpu,
    tp: Annotated[
        int, typer.Option(help="Tensor-parallel GPUs per replica: 1, 2, 4 or 8.")
    ] = DEFAULT_DEPLOYMENT.tp,
    rate_scale: Annotated[
        float, typer.Option(help="Multiply the arrival rate, keeping the trace's duration and shape.")
    ] = 1.0,
    scale_mode: Annotated[str, typer.Option(help=_SCALE_MODE_HELP)] = "users",
    start_s: Annotated[
        float | None, typer.Option(help="Start of the window to tune on (s from the first request).")
    ] = None,
    duration_s: Annotated[float | None, typer.Option(help="Length of the window to tune on (s).")] = None,
    rate_shape: Annotated[str, typer.Option(help=_RATE_SHAPE_HELP)] = "smooth",
    slo_ttft_s: Annotated[
        float, typer.Option(help="SLO on time to first token (s).")
    ] = DEFAULT_DEPLOYMENT.slo_ttft_s,
    slo_tpot_s: Annotated[
        float, typer.Option(help="SLO on mean time per output token after the first (s).")
    ] = DEFAULT_DEPLOYMENT.slo_tpot_s,
    slo_ttft_per_1k_tokens_s: Annotated[
        float, typer.Option(help="Length-aware TTFT SLO: this many more seconds per 1,000 prompt tokens.")
    ] = DEFAULT_DEPLOYMENT.slo_ttft_per_1k_tokens_s,
    seed: Annotated[int, typer.Option(help="Seed of the workloads, the simulator and the sampler.")] = 0,
    policy_config: Annotated[
        Path | None,
        typer.Option(
            help="YAML file: policy name -> {parameter: value}; the tuned policy's entry is the base."
        ),
    ] = None,
    timeout_s: Annotated[
        float, typer.Option(help="A client gives up after this long without a first token (s).")
    ] = 60.0,
    grace_s: Annotated[
        float, typer.Option(help="Grace period of a draining replica before it is killed (s).")
    ] = 30.0,
    router: Annotated[
        str, typer.Option(help="How the gateway spreads requests: least-outstanding or round-robin.")
    ] = "least-outstanding",
    calibration: Annotated[
        Path | None, typer.Option(help="Calibration profile from `llmscale calibrate`.")
    ] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="Engine: most sequences in one batch.")] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="Engine: token budget of one iteration.")
    ] = None,
    chunked_prefill: Annotated[
        bool | None, typer.Option("--chunked-prefill/--no-chunked-prefill", help="Engine: chunked prefill.")
    ] = None,
    json_out: _JsonOpt = None,
) -> None:
    # Help text: TUNE_HELP.
    from llmscale.backtest.runner import check_policies
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

    console = _json_console(
        json_out,
        *(("--trace", t) for t in trace or []),
        ("--policy-config", policy_config),
        ("--calibration", calibration),
        ("--out", out),
    )
    err = _console(stderr=True)
    _check_backtest_options(
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
    params = _load_policy_config(policy_config)
    sources: list[tuple[str, Path | None, str | None]] = [(str(t), t, None) for t in trace or []]
    sources += [(f"workload {p}", None, p) for p in workload or []]
    if not sources:
        raise ConfigError("give at least one --trace or --workload to tune on")
    engine = _engine_settings(calibration, max_num_seqs, max_num_batched_tokens, chunked_prefill)
    cases = []
    for label, path, preset in sources:
        w = _load_workload(
            path, format, preset, seed, start_s, duration_s, rate_scale, rate_shape, scale_mode=scale_mode
        )
        settings = _sized_settings(
            w,
            err,
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
            sim_options={"timeout_s": timeout_s, "grace_s": grace_s, "router": router},
            engine=engine,
            calibration=calibration,
            params={k: dict(v) for k, v in params.items()},
        )
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
    console.print(summary.text, markup=False, highlight=False)
    if json_out is not None:
        from llmscale.outputs import tune_document

        tdoc = tune_document(result, out, report, summary.found)
        write_json("tune", tdoc, json_out, write_file=_write_output)
    if not summary.found:
        raise typer.Exit(1)


@app.command("policies")
def policies_cmd() -> None:
    """List every policy with a one-line description, its parameters and the signals it reads."""
    from rich.console import Console
    from rich.table import Table

    from llmscale.policies.base import POLICIES, policy_names

    table = Table(title="llmscale policies")
    table.add_column("name")
    table.add_column("what it does")
    table.add_column("parameters (defaults, ranges)")
    table.add_column("catalogue signals read")
    for name in policy_names():
        info = POLICIES[name]
        # Ranges without inner spaces, so a wrapped cell never splits "(0, inf)" over two lines.
        params = ", ".join(
            f"{k}={p.default}"
            + (f" {p.interval.replace(', ', ',').replace(' | ', '|')}" if p.interval else "")
            for k, p in info.params.items()
        )
        table.add_row(name, info.summary, params, ", ".join(info.signals_read(info.defaults)) or "-")
    Console().print(table)


@app.command("workloads")
def workloads_cmd() -> None:
    """List the built-in workload presets."""
    from rich.console import Console
    from rich.table import Table

    from llmscale.workloads import PRESETS

    table = Table(title="workload presets (--workload NAME)")
    table.add_column("name")
    table.add_column("description")
    for name, preset in PRESETS.items():
        table.add_row(name, getattr(preset, "description", ""))
    Console().print(table)


RUN_HELP = (
    "Run the controller live: read the fleet's metrics, decide with the configured policy and "
    "guards, and scale the target (Kubernetes scale subresource, KEDA external scaler or emulate).\n\n"
    "Serves /metrics, /healthz and /readyz, writes one JSON line per tick to the decision log, and "
    "stops cleanly on SIGTERM or SIGINT. See examples/llmscale.yaml."
)


@app.command("run", help=RUN_HELP)
def run_cmd(
    config: Annotated[Path, typer.Option("--config", help="The controller's YAML config file.")],
    once: Annotated[bool, typer.Option("--once", help="Run one tick and exit.")] = False,
    max_ticks: Annotated[
        int | None,
        typer.Option("--max-ticks", help="Stop after this many ticks (default: run until stopped)."),
    ] = None,
    mode: Annotated[
        str | None, typer.Option("--mode", help="apply, dry-run or shadow; overrides the file's mode.")
    ] = None,
) -> None:
    # Help text: RUN_HELP.
    import logging
    import signal
    import threading

    from llmscale.config import check_run_files, load_config
    from llmscale.wiring import build_runtime

    if max_ticks is not None and max_ticks < 1:
        raise ConfigError(f"--max-ticks = {max_ticks}, must be >= 1")
    cfg = load_config(config, mode=mode)
    check_run_files(cfg, config)
    runtime = build_runtime(cfg, config_name=config.name)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        logging.getLogger("llmscale").info("%s: stopping after the current tick", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        runtime.controller.start()
        try:
            runtime.server.start()
        except OSError as e:
            raise ConfigError(f"{config.name}: server.listen {cfg.server.listen}: cannot listen: {e}") from e
        bounded = once or max_ticks is not None
        ticks = runtime.controller.run(stop, max_ticks=1 if once else max_ticks)
        logging.getLogger("llmscale").info(
            "stopped after %d tick(s), %d failed", ticks, runtime.controller.failed_ticks
        )
        failure = runtime.controller.last_failure
        if bounded and ticks and failure is not None:
            # A script running `--once` (or a bounded run) must see that the tick it asked for did
            # not do what it decided: exit 1, with the reason, like any other failure.
            raise LlmscaleError(f"the last tick failed: {failure}")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        runtime.server.stop()
        runtime.close()


EMULATE_HELP = (
    "Serve N simulated vLLM replicas over HTTP in wall-clock time (the backtest's replica model).\n\n"
    "Port P is a front door that routes like the simulator (least outstanding) and serves the OpenAI API "
    "and, with --admin-api, the admin API (/admin/replicas, /admin/scale, /admin/targets; bearer token "
    "from --admin-token-file or $LLMSCALE_EMULATE_ADMIN_TOKEN); each replica also listens on the "
    "next free port above P with the OpenAI API and a vLLM + DCGM /metrics page. Runs until Ctrl-C, "
    "SIGTERM or --max-seconds."
)


@app.command("emulate", help=EMULATE_HELP)
def emulate_cmd(
    replicas: Annotated[int, typer.Option(help="Ready replicas at start.")] = 1,
    model: Annotated[
        str, typer.Option(help="Model: short name (llama-3-8b) or Hugging Face id.")
    ] = DEFAULT_DEPLOYMENT.model,
    gpu: Annotated[str, typer.Option(help=GPU_HELP)] = DEFAULT_DEPLOYMENT.gpu,
    tp: Annotated[int, typer.Option(help="Tensor-parallel GPUs per replica.")] = DEFAULT_DEPLOYMENT.tp,
    host: Annotated[str, typer.Option(help="Address every listener binds.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Front-door port; replicas take the next free ones (0: any).")
    ] = 8000,
    cold_start_s: Annotated[
        float | None,
        typer.Option(
            help="Total cold start of a new replica, split evenly over Pending, Loading, Warmup (s)."
        ),
    ] = None,
    pending_s: Annotated[
        float | None, typer.Option(help="Pending phase (s); default from the catalogue.")
    ] = None,
    loading_s: Annotated[
        float | None, typer.Option(help="Loading phase (s); default from the catalogue.")
    ] = None,
    warmup_s: Annotated[
        float | None, typer.Option(help="Warmup phase (s); default from the catalogue.")
    ] = None,
    grace_s: Annotated[float, typer.Option(help="Grace period of a draining replica (s).")] = 30.0,
    timeout_s: Annotated[
        float, typer.Option(help="Requests waiting this long without a token fail (s).")
    ] = 60.0,
    time_scale: Annotated[float, typer.Option(help="Simulated seconds per wall second.")] = 1.0,
    default_max_tokens: Annotated[int, typer.Option(help="max_tokens when a request gives none.")] = 16,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model id served (default: the model's Hugging Face id).")
    ] = None,
    max_seconds: Annotated[float | None, typer.Option(help="Stop after this many wall seconds.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the simulator.")] = 0,
    hbm_glitch: Annotated[
        list[str] | None, typer.Option(help=_HBM_GLITCH_HELP + " Times from the emulator's start.")
    ] = None,
    adaptive_batch: Annotated[bool, typer.Option(help=_ADAPTIVE_BATCH_HELP)] = False,
    calibration: Annotated[
        Path | None,
        typer.Option(
            help="Calibration profile from `llmscale calibrate`: the step-time model of your engine."
        ),
    ] = None,
    max_num_seqs: Annotated[
        int | None, typer.Option(help="Engine: most sequences in one batch (default 256).")
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="Engine: token budget of one iteration (default 8192).")
    ] = None,
    chunked_prefill: Annotated[
        bool | None,
        typer.Option("--chunked-prefill/--no-chunked-prefill", help="Engine: chunked prefill (default on)."),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="A local tokenizer.json (or a directory with one) to count prompt tokens with, or "
            "'builtin' for the small one llmscale ships; never downloads. Default: about 4 characters "
            "a token."
        ),
    ] = None,
    vllm_version: Annotated[
        str | None,
        typer.Option(
            help="The vLLM release to play (0.10.0 or later; default the newest modelled): its error "
            "body (flat before 0.10.1, nested from it), its /metrics names (0.10 keeps the names "
            "deprecated in 0.9), /version."
        ),
    ] = None,
    admin_api: Annotated[
        bool, typer.Option(help="Serve the admin API (scale, list replicas and targets); off by default.")
    ] = False,
    admin_token_file: Annotated[
        str | None,
        typer.Option(
            help="File holding the admin API's bearer token (default: $LLMSCALE_EMULATE_ADMIN_TOKEN)."
        ),
    ] = None,
    admin_max_scale_up: Annotated[int, typer.Option(help="Replicas one /admin/scale call may add.")] = 16,
    enable_sleep_mode: Annotated[
        bool,
        typer.Option(
            "--enable-sleep-mode",
            help="vLLM's sleep mode: replicas serve POST /sleep?level=1, POST /wake_up, GET /is_sleeping.",
        ),
    ] = False,
    wake_s: Annotated[
        float | None,
        typer.Option(help="Waking a level-1 sleeper (s); default from the catalogue's sleeping tier."),
    ] = None,
) -> None:
    import asyncio

    from llmscale.emulate import EmulateConfig, serve
    from llmscale.emulate.config import admin_token
    from llmscale.emulate.versions import DEFAULT_VLLM_VERSION

    if max_seconds is not None and not (math.isfinite(max_seconds) and max_seconds > 0):
        raise ConfigError(f"--max-seconds = {max_seconds}, must be a finite number > 0")
    if cold_start_s is not None:
        if not (math.isfinite(cold_start_s) and cold_start_s >= 0):
            raise ConfigError(f"--cold-start-s = {cold_start_s}, must be a finite number >= 0")
        third = cold_start_s / 3.0
        pending_s = third if pending_s is None else pending_s
        loading_s = third if loading_s is None else loading_s
        warmup_s = third if warmup_s is None else warmup_s
    cfg = EmulateConfig(
        model=model,
        gpu=gpu,
        tp=tp,
        replicas=replicas,
        host=host,
        port=port,
        time_scale=time_scale,
        pending_s=pending_s,
        loading_s=loading_s,
        warmup_s=warmup_s,
        grace_s=grace_s,
        timeout_s=timeout_s,
        default_max_tokens=default_max_tokens,
        served_model_name=served_model_name,
        seed=seed,
        calibration=None if calibration is None else str(calibration),
        **_engine_settings(calibration, max_num_seqs, max_num_batched_tokens, chunked_prefill),
        tokenizer=tokenizer,
        admin_api=admin_api,
        admin_token=admin_token(admin_token_file, what="--admin-token-file") if admin_api else None,
        admin_max_scale_up=admin_max_scale_up,
        **_fault_settings(hbm_glitch, adaptive_batch),
        sleep_mode=enable_sleep_mode,
        wake_s=wake_s,
        vllm_version=DEFAULT_VLLM_VERSION if vllm_version is None else vllm_version,
    )

    def ready(server: Any) -> None:
        # One line per fact, flushed: scripts and tests read the ports from here.
        print(f"front door: {server.base_url} (model {server.served_model})", flush=True)
        print(f"prompt tokens: {server.tokens.source}", flush=True)
        print(f"vLLM version played: {server.version.text}", flush=True)
        print(f"admin API: {'on, bearer token required' if admin_api else 'off'}", flush=True)
        for name, p in sorted(server.replica_ports().items()):
            print(f"replica {name}: http://{host}:{p}", flush=True)
        print("ready", flush=True)

    asyncio.run(serve(cfg, max_seconds=max_seconds, on_ready=ready, handle_signals=True))


LOADGEN_HELP = (
    "Replay a trace's arrivals against an OpenAI-compatible endpoint with streaming requests and print "
    "TTFT / TPOT / E2E percentiles, bounded by --max-requests and --max-duration-s."
)


@app.command("loadgen", help=LOADGEN_HELP)
def loadgen_cmd(
    target: Annotated[str, typer.Option(help="Base URL of the server, e.g. http://127.0.0.1:8000.")],
    trace: Annotated[Path | None, typer.Option(help="Request trace (any backtest format).")] = None,
    format: Annotated[
        str, typer.Option("--format", help="Trace format: auto, azure, mooncake, burstgpt, servegen, csv.")
    ] = "auto",
    workload: Annotated[
        str | None, typer.Option("--workload", help="Built-in workload preset instead of a trace.")
    ] = None,
    rate_scale: Annotated[float, typer.Option(help="Multiply the arrival rate.")] = 1.0,
    scale_mode: Annotated[str, typer.Option(help=_SCALE_MODE_HELP)] = "users",
    start_s: Annotated[float | None, typer.Option(help="Start of the window to replay (s).")] = None,
    duration_s: Annotated[float | None, typer.Option(help="Length of the window to replay (s).")] = None,
    rate_shape: Annotated[str, typer.Option(help=_RATE_SHAPE_HELP)] = "smooth",
    burst_share: Annotated[float, typer.Option(help=_BURST_SHARE_HELP)] = 0.0,
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
    console = _console(stderr=json_to_stdout)
    check_option("--max-requests", max_requests, "[1, inf)", integer=True)
    check_option("--max-duration-s", max_duration_s, "(0, inf)")
    check_option("--concurrency-limit", concurrency_limit, "[1, inf)", integer=True)
    check_option("--request-timeout-s", request_timeout_s, "(0, inf)")
    if json_out is not None and not json_to_stdout:
        check_output_path("--json", Path(json_out))
        check_distinct_paths([("--json", Path(json_out))], [("--trace", trace)])
    w = _load_workload(
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
    console.print(result_table(result))
    for note in result.notes:
        console.print(f"[dim]{note}[/]")
    if json_out is not None:
        doc = {**result.as_json(), "requests": [asdict(r) for r in result.records]}
        write_json("loadgen", doc, json_out, write_file=_write_output)
        if not json_to_stdout:
            console.print(f"results: {json_out}")
    if result.records and result.ok == 0:
        first = next((r.error for r in result.records if r.error), "")
        raise LlmscaleError(f"no request succeeded out of {len(result.records)}; first error: {first}")


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


@app.command("calibrate", help=CALIBRATE_HELP)
def calibrate_cmd(
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
    json_out: _JsonOpt = None,
) -> None:
    from rich.table import Table

    from llmscale.offline.calibrate import (
        SERVE_KINDS,
        calibrate,
        read_closed_batches,
        read_prometheus,
        read_serve_result,
    )
    from llmscale.offline.closed_batch import EngineSettings

    console = _json_console(json_out, *(("FILE", f) for f in files or []))
    if prometheus_selector is not None:
        # one name per concept across commands (analyze and diagnose say --selector)
        if selector and selector != prometheus_selector:
            raise ConfigError("give --selector only (--prometheus-selector is its deprecated name)")
        _console(stderr=True).print(
            "[bold yellow]warning:[/] --prometheus-selector is deprecated: use --selector", highlight=False
        )
        selector = prometheus_selector
    try:
        held = tuple(int(x) for x in hold_out_lengths.split(",") if x.strip())
    except ValueError:
        raise ConfigError(
            f"--hold-out-lengths = {hold_out_lengths!r}, must be integers separated by commas"
        ) from None
    engine = EngineSettings(**_engine_settings(None, max_num_seqs, max_num_batched_tokens, chunked_prefill))
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
            with _console(stderr=True).status(f"Replaying the closed batches of {f} on the simulator..."):
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
            timeout_s=_prometheus_timeout(prometheus_timeout_s),
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
    err = _console(stderr=True)
    for note in profile.notes:
        if note.startswith("warning:"):
            err.print("[bold yellow]warning:[/]" + note[len("warning:") :], highlight=False)
        else:
            console.print(note, highlight=False)
    profile.save(out)
    console.print(f"profile: {out}")
    if json_out is not None:
        from llmscale.outputs import calibrate_document

        write_json("calibrate", calibrate_document(profile, out, inputs), json_out, write_file=_write_output)


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
            timeout_s=_prometheus_timeout(timeout_s),
        )
    from llmscale.analyze.log import read_decision_log

    assert decisions is not None
    return read_decision_log(decisions, policy=policy)


_JsonOpt = Annotated[
    str | None,
    typer.Option(
        "--json",
        help="Also write the results as JSON to PATH ('-' for stdout: the JSON alone there, the "
        "table on stderr); schema: src/llmscale/schemas/<command>.schema.json.",
    ),
]


def _json_console(json_out: str | None, *checked: tuple[str, Path | None]) -> Any:
    """The console of a command with --json: stderr when the JSON takes stdout. A --json PATH is
    checked writable, and distinct from ``checked`` (the command's inputs), before any work."""
    if json_out not in (None, "-"):
        assert json_out is not None
        check_output_path("--json", Path(json_out))
        check_distinct_paths([("--json", Path(json_out))], list(checked))
    return _console(stderr=json_out == "-")


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


def _prometheus_timeout(timeout_s: float) -> float:
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ConfigError(f"--prometheus-timeout-s = {timeout_s}: must be a finite number > 0")
    return timeout_s


@app.command("analyze", help=ANALYZE_HELP)
def analyze_cmd(
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
    json_out: _JsonOpt = None,
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
    console = _json_console(
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
        write_json("analyze", adoc, json_out, write_file=_write_output)


@app.command("diagnose", help=DIAGNOSE_HELP)
def diagnose_cmd(
    decisions: _DecisionsArg = None,
    policy: _PolicyOpt = None,
    prometheus: _PromOpt = None,
    start: _StartOpt = None,
    end: _EndOpt = None,
    step_s: _StepOpt = 15.0,
    selector: _SelectorOpt = "",
    window: _WindowOpt = "1m",
    prometheus_timeout_s: _PromTimeoutOpt = 30.0,
    json_out: _JsonOpt = None,
) -> None:
    from rich.table import Table

    from llmscale.analyze.diagnose import diagnose_table

    console = _json_console(json_out, ("DECISIONS", decisions))

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
        write_json("diagnose", ddoc, json_out, write_file=_write_output)


@app.command(
    "tenants",
    help=(
        "Backtest several models sharing a pool of MIG-partitioned GPUs: each tenant's trace, model, "
        "MIG profile, policy and quota from CONFIG (see llmscale.backtest.tenants); scale-ups are admitted "
        "within the quota, the pool's free placements and the node checks (memory, CPU throttling, disk IO)."
    ),
)
def tenants_cmd(
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
        write_json("tenants", result.as_json(), json_out, write_file=_write_output)


@app.command(
    "node-check",
    help=(
        "The node checks, read now from Prometheus (node-exporter and cAdvisor): free memory "
        "> 2 GiB, CPU throttling < 10%, disk IO < 70%. Exit 0 when the node may take a replica, 1 if not."
    ),
)
def node_check_cmd(
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
        write_json("node-check", doc, json_out, write_file=_write_output)
    # 2: the node could not be checked (Prometheus unreachable or answering malformed), as for
    # any unreadable input; 1: it was checked and fails; a scale-up is held on either.
    if errors:
        raise typer.Exit(2)
    if failed:
        raise typer.Exit(1)


def main() -> None:
    try:
        app()
    except LlmscaleError as e:
        typer.echo(f"llmscale: error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        typer.echo("llmscale: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
