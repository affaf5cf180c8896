"""The options ``backtest``, ``tune`` and ``emulate`` (and ``loadgen``'s workload) share, declared once.

Each option is a typer ``Annotated`` alias: its type and help live here, and a command lists it
in its signature with its default, e.g. ``model: Model = DEFAULT_DEPLOYMENT.model``; the flag is
the parameter's name (``min_replicas`` -> ``--min-replicas``, and ``LLMSCALE_MIN_REPLICAS``). The
checks of a group (:func:`check_fleet_options`, :func:`check_engine`, :func:`workload_source`)
name each option as the user typed it; the work they feed lives in the library
(:mod:`llmscale.backtest.setup`, :mod:`llmscale.workloads.source`).

Adding an option to ``backtest``:

1. declare it here when another command takes it too (an alias with its help), else in
   ``cli/backtest.py``'s signature with ``typer.Option(help=...)``;
2. add the parameter to :func:`llmscale.cli.backtest.backtest` with its default, check its range
   where the others are checked (``check_option("--my-option", my_option, "[0, inf)")``);
3. pass it to the library: a field of :class:`~llmscale.backtest.setup.FleetRequest` (sizing), or
   a ``with_...`` step of :mod:`llmscale.backtest.setup` that returns new settings.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli.common import notice
from llmscale.edge import check_option
from llmscale.errors import ConfigError
from llmscale.perf.catalogue import GPUS

__all__ = [
    "GPU_HELP",
    "AdaptiveBatch",
    "BurstShare",
    "Calibration",
    "ChunkedPrefill",
    "Format",
    "Gpu",
    "GraceS",
    "HbmGlitch",
    "InitialReplicas",
    "Lengths",
    "MaxNumBatchedTokens",
    "MaxNumSeqs",
    "MaxReplicas",
    "MinReplicas",
    "Model",
    "RateScale",
    "RateShape",
    "Router",
    "ScaleMode",
    "Seed",
    "SloTpotS",
    "SloTtftPer1kTokensS",
    "SloTtftS",
    "TimeoutS",
    "Tp",
    "check_engine",
    "check_fleet_options",
    "load_policy_config",
    "load_workload",
    "prometheus_timeout",
    "split_policies",
    "workload_source",
]

#: Every GPU the catalogue knows, for the --gpu options' help (llmscale.perf.catalogue.GPUS).
GPU_HELP = "GPU: " + ", ".join(GPUS) + " (or an alias, or a MIG slice gpu:profile)."

# -- the deployment -------------------------------------------------------------------------------
Model = Annotated[str, typer.Option(help="Model: short name (llama-3-8b) or Hugging Face id.")]
Gpu = Annotated[str, typer.Option(help=GPU_HELP)]
Tp = Annotated[int, typer.Option(help="Tensor-parallel GPUs per replica: 1, 2, 4 or 8.")]
# -- number formats, as vLLM names its arguments (docs/fp8.md) -----------------------------------
Dtype = Annotated[
    str, typer.Option(help="The model's weight/activation dtype, as vLLM's --dtype: auto, bfloat16, float16.")
]
Quantization = Annotated[
    str,
    typer.Option(
        help="As vLLM's --quantization: none, or fp8 (FP8 linear weights: W8A8 on H100/H200, "
        "weight-only on A100)."
    ),
]
KvCacheDtype = Annotated[
    str,
    typer.Option(help="As vLLM's --kv-cache-dtype: auto, fp8, fp8_e4m3, fp8_e5m2 (fp8 halves the KV bytes)."),
]

# -- the fleet's bounds (None: sized from the workload) ------------------------------------------
MinReplicas = Annotated[int, typer.Option(help="Lower bound for autoscaling policies.")]
MaxReplicas = Annotated[
    int | None, typer.Option(help="Upper bound (default: max(64, 2 x the peak minute's need)).")
]
InitialReplicas = Annotated[
    int | None, typer.Option(help="Ready replicas at time 0 (default: enough for the first 5 minutes).")
]

# -- the SLOs -------------------------------------------------------------------------------------
SloTtftS = Annotated[float, typer.Option(help="SLO on time to first token (s).")]
SloTpotS = Annotated[float, typer.Option(help="SLO on mean time per output token after the first (s).")]
SloTtftPer1kTokensS = Annotated[
    float,
    typer.Option(
        help="Length-aware TTFT SLO: this many more seconds per 1,000 prompt tokens "
        "(target = --slo-ttft-s + this x prompt / 1000)."
    ),
]

# -- the simulated fleet ---------------------------------------------------------------------------
TimeoutS = Annotated[float, typer.Option(help="A client gives up after this long without a first token (s).")]
GraceS = Annotated[float, typer.Option(help="Grace period of a draining replica before it is killed (s).")]
Router = Annotated[
    str, typer.Option(help="How the gateway spreads requests: least-outstanding or round-robin.")
]
Seed = Annotated[int, typer.Option(help="Seed for every random draw; same seed, same results.")]

# -- the engine ----------------------------------------------------------------------------------
Calibration = Annotated[
    Path | None,
    typer.Option(help="Calibration profile from `llmscale calibrate`: the step-time model of your engine."),
]
MaxNumSeqs = Annotated[
    int | None, typer.Option(help="Engine: most sequences in one batch (vLLM's; default 256).")
]
MaxNumBatchedTokens = Annotated[
    int | None, typer.Option(help="Engine: token budget of one iteration (default 8192).")
]
ChunkedPrefill = Annotated[
    bool | None,
    typer.Option(
        "--chunked-prefill/--no-chunked-prefill",
        help="Engine: split prompts into chunks that share iterations with decodes (vLLM V1: on).",
    ),
]

# -- the workload ----------------------------------------------------------------------------------
Format = Annotated[
    str, typer.Option("--format", help="Trace format: auto, azure, mooncake, burstgpt, servegen, csv.")
]
RateScale = Annotated[
    float, typer.Option(help="Multiply the arrival rate, keeping the trace's duration and shape.")
]
ScaleMode = Annotated[
    str,
    typer.Option(
        help="How --rate-scale above 1 adds requests: 'users' (N x the users: independently "
        "time-shifted copies of the trace, +-60 s each) or 'burst' (the same users, each burst N x "
        "larger: every copy next to its original). See docs/scaling-traces.md."
    ),
]
Lengths = Annotated[
    str | None,
    typer.Option(
        help="Rate-only traces (ServeGen client folders and rate files): prompt and output lengths, "
        "prompt=MEAN[:CV],output=MEAN[:CV] tokens (lognormal; CV default 1.31), or m-large / m-small "
        "(ServeGen's published means). Default: the m-large means, printed."
    ),
]
RateShape = Annotated[
    str,
    typer.Option(
        help="ServeGen traces: 'smooth' (rate continuous, piecewise linear, each 10-minute window's "
        "count kept) or 'step' (constant per window, jumping at its edges)."
    ),
]
BurstShare = Annotated[
    float,
    typer.Option(
        help="High-entropy bursts (a Poisson-uniform burst mixture): this share of the requests (0: "
        "none) regrouped into 50 ms bursts at Poisson times (1 a second), each joining the burst "
        "nearest its own arrival."
    ),
]

# -- injected faults ---------------------------------------------------------------------------------
HBM_GLITCH_HELP = (
    "HBM-bandwidth glitches (a periodic glitch train): START_S:DURATION_S[:REPLICA_SHARE[:RETAINED_SHARE]]; "
    "every 83 ms the oldest REPLICA_SHARE (1) of the replicas keep RETAINED_SHARE (8/128) of their "
    "memory bandwidth for 17 % of the period. Repeat for several windows."
)
HbmGlitch = Annotated[list[str] | None, typer.Option(help=HBM_GLITCH_HELP)]
AdaptiveBatch = Annotated[
    bool,
    typer.Option(
        help="The adaptive batch fuse on every replica: below 16/128 of its bandwidth for more "
        "than 3 periods of 83 ms, max_num_seqs halves (down to 32); 4 healthy periods double it back."
    ),
]


def check_fleet_options(
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
    """Every numeric option of ``backtest`` and ``tune`` in its range, named as the user typed it."""
    from llmscale.backtest.setup import ROUTERS
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


def check_engine(engine: Any) -> None:
    """The engine settings (:func:`llmscale.backtest.setup.engine_settings`) as vLLM would take them,
    named by their options (a calibration profile's values included)."""
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        if getattr(engine, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} = {getattr(engine, name)}, must be >= 1")
    if engine.chunked_prefill and engine.max_num_batched_tokens < engine.max_num_seqs:
        # vLLM refuses to start so: every running sequence needs a token of the budget each step.
        raise ConfigError(
            f"--max-num-batched-tokens = {engine.max_num_batched_tokens}, must be >= --max-num-seqs "
            f"({engine.max_num_seqs}) with chunked prefill, as vLLM requires"
        )


def prometheus_timeout(timeout_s: float) -> float:
    """``--prometheus-timeout-s``, a finite number of seconds > 0."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ConfigError(f"--prometheus-timeout-s = {timeout_s}: must be a finite number > 0")
    return timeout_s


def split_policies(values: list[str] | None) -> list[str]:
    """``--policy`` values (repeated or comma-separated) as policy names (none: the defaults)."""
    from llmscale.policies.base import select_policies

    names: list[str] = []
    for v in values or []:
        names.extend(p.strip() for p in v.split(",") if p.strip())
    try:
        return select_policies(names)
    except ConfigError as e:
        raise ConfigError(f"--policy {e}") from e


def load_policy_config(path: Path | None) -> dict[str, dict[str, Any]]:
    """``--policy-config``: policy name -> {parameter: value} ({} when not given)."""
    if path is None:
        return {}
    from llmscale.policies.config_file import load_policy_config as load

    try:
        return load(path)
    except ConfigError as e:
        raise ConfigError(f"--policy-config {e}") from e


def workload_source(
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
) -> Any:
    """The :class:`~llmscale.workloads.source.WorkloadSource` of the workload options, each checked
    (all but ``--burst-share``, which :func:`load_workload` checks once the workload is read)."""
    from llmscale.workloads.lengths import parse_lengths
    from llmscale.workloads.servegen import RATE_SHAPES
    from llmscale.workloads.source import WorkloadSource
    from llmscale.workloads.transform import SCALE_MODES

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
    if trace is None and length_model is not None:
        raise ConfigError(
            "--lengths applies to rate-only traces (--trace of ServeGen files), not to --workload"
        )
    return WorkloadSource(
        trace=trace,
        fmt=fmt,
        preset=preset,
        start_s=start_s,
        duration_s=duration_s,
        rate_shape=rate_shape,
        lengths=length_model,
        rate_scale=rate_scale,
        scale_mode=scale_mode,
        burst_share=burst_share,
    )


def load_workload(source: Any, seed: int, err: Any, *, quiet: bool = False) -> Any:
    """The workload of ``source`` (:func:`workload_source`) with ``seed``, telling the user on
    ``err`` what was assumed (a rate-only trace's lengths) and how the rate was scaled."""
    from llmscale.workloads.lengths import assumed_lengths_text
    from llmscale.workloads.source import read_workload, reshape_workload
    from llmscale.workloads.transform import USERS_SHIFT_S

    try:
        w = read_workload(source, seed)
    except ConfigError as e:
        if source.lengths is not None and "servegen traces only" in str(e):
            raise ConfigError(
                f"--lengths applies to rate-only traces (ServeGen client folders and rate files); "
                f"{source.trace} carries its own lengths"
            ) from e
        raise
    if source.trace is not None:
        # A rate-only trace has no lengths: say which were drawn (a reasoning model's clients
        # replayed with chat lengths look easy).
        assumed = assumed_lengths_text(w.meta.get("lengths"))
        if assumed and not quiet:
            how = "given by --lengths" if source.lengths is not None else "assumed; set them with --lengths"
            text = f"{source.trace}: the trace has no lengths: {assumed}, {how}"
            notice(err, f"[dim]{text}[/]", text)
    check_option("--burst-share", source.burst_share, "[0, 1]")
    try:
        w = reshape_workload(w, source, seed)
    except ConfigError as e:
        raise ConfigError(f"--rate-scale: {e}") from e
    k = source.rate_scale
    if k != 1.0 and not quiet:
        what = (
            f"{k:g} x the users: independently time-shifted copies (+-{USERS_SHIFT_S:g} s)"
            if source.scale_mode == "users"
            else f"the same users, each burst {k:g} x larger"
        )
        if k < 1.0:
            what = "a random subset of the requests (both modes)"
        text = f"--rate-scale {k:g} --scale-mode {source.scale_mode}: {what}"
        notice(err, f"[dim]{text}[/]", text)
    return w
