"""``llmscale emulate``: simulated vLLM replicas served over HTTP in wall-clock time."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer

from llmscale.cli.options import (
    HBM_GLITCH_HELP,
    AdaptiveBatch,
    Calibration,
    ChunkedPrefill,
    Dtype,
    Gpu,
    GraceS,
    KvCacheDtype,
    MaxNumBatchedTokens,
    MaxNumSeqs,
    Model,
    Quantization,
    Seed,
    TimeoutS,
    Tp,
    check_engine,
)
from llmscale.deployment import DEFAULT_DEPLOYMENT
from llmscale.errors import ConfigError

__all__ = ["EMULATE_HELP", "emulate"]

EMULATE_HELP = (
    "Serve N simulated vLLM replicas over HTTP in wall-clock time (the backtest's replica model).\n\n"
    "Port P is a front door that routes like the simulator (least outstanding) and serves the OpenAI API "
    "and, with --admin-api, the admin API (/admin/replicas, /admin/scale, /admin/targets; bearer token "
    "from --admin-token-file or $LLMSCALE_EMULATE_ADMIN_TOKEN); each replica also listens on the "
    "next free port above P with the OpenAI API and a vLLM + DCGM /metrics page. Runs until Ctrl-C, "
    "SIGTERM or --max-seconds."
)


def emulate(
    replicas: Annotated[int, typer.Option(help="Ready replicas at start.")] = 1,
    model: Model = DEFAULT_DEPLOYMENT.model,
    gpu: Gpu = DEFAULT_DEPLOYMENT.gpu,
    tp: Tp = DEFAULT_DEPLOYMENT.tp,
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
    grace_s: GraceS = 30.0,
    timeout_s: TimeoutS = 60.0,
    time_scale: Annotated[float, typer.Option(help="Simulated seconds per wall second.")] = 1.0,
    default_max_tokens: Annotated[int, typer.Option(help="max_tokens when a request gives none.")] = 16,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model id served (default: the model's Hugging Face id).")
    ] = None,
    max_seconds: Annotated[float | None, typer.Option(help="Stop after this many wall seconds.")] = None,
    seed: Seed = 0,
    hbm_glitch: Annotated[
        list[str] | None, typer.Option(help=HBM_GLITCH_HELP + " Times from the emulator's start.")
    ] = None,
    adaptive_batch: AdaptiveBatch = False,
    calibration: Calibration = None,
    dtype: Dtype = DEFAULT_DEPLOYMENT.dtype,
    quantization: Quantization = DEFAULT_DEPLOYMENT.quantization,
    kv_cache_dtype: KvCacheDtype = DEFAULT_DEPLOYMENT.kv_cache_dtype,
    max_num_seqs: MaxNumSeqs = None,
    max_num_batched_tokens: MaxNumBatchedTokens = None,
    chunked_prefill: ChunkedPrefill = None,
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

    from llmscale.backtest.setup import engine_settings, faults_from_text
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
    engine = engine_settings(calibration, max_num_seqs, max_num_batched_tokens, chunked_prefill)
    check_engine(engine)
    token = admin_token(admin_token_file, what="--admin-token-file") if admin_api else None
    faults = faults_from_text(hbm_glitch or (), adaptive_batch)
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
        dtype=dtype,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        chunked_prefill=engine.chunked_prefill,
        tokenizer=tokenizer,
        admin_api=admin_api,
        admin_token=token,
        admin_max_scale_up=admin_max_scale_up,
        hbm_glitches=faults.hbm_glitches,
        adaptive_batch=faults.adaptive_batch,
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
