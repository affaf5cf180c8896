"""``llmscale run``: the controller live against a fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.errors import ConfigError, LlmscaleError

__all__ = ["RUN_HELP", "run"]

RUN_HELP = (
    "Run the controller live: read the fleet's metrics, decide with the configured policy and "
    "guards, and scale the target (Kubernetes scale subresource, KEDA external scaler or emulate).\n\n"
    "Serves /metrics, /healthz and /readyz, writes one JSON line per tick to the decision log, and "
    "stops cleanly on SIGTERM or SIGINT. See examples/llmscale.yaml."
)


def run(
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
