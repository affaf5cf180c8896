"""``llmscale emulate`` as a real subprocess in its own process group, always stopped.

Imported as ``support.emulate_proc`` (``tests/`` is on the path), not from a ``conftest``
module: several directories' ``conftest`` modules share that one name, and the last collected
wins, so ``from conftest import ...`` breaks when another directory is collected first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ADMIN_TOKEN", "START_TIMEOUT_S", "TIME_SCALE", "EmulateProcess", "start_emulate", "stop_emulate"]

REPO = Path(__file__).resolve().parents[2]
LLMSCALE = Path(sys.executable).with_name("llmscale")

#: The CLI imports numpy and the performance model before it listens; on a shared, busy
#: 2-core machine that has taken up to ~20 s, so start-up gets a generous bound.
START_TIMEOUT_S = 90.0
#: Simulated seconds per wall second of the `emulate_slow` fleet.
TIME_SCALE = 0.25
#: The admin token of the `emulate_slow` fleet (given through the environment, as a user would).
ADMIN_TOKEN = "emulate-slow-admin-token-42"


@dataclass
class EmulateProcess:
    proc: subprocess.Popen[str]
    base_url: str
    replica_urls: dict[str, str]


def start_emulate(*args: str, env: dict[str, str] | None = None) -> EmulateProcess:
    """Run ``llmscale emulate --port 0 ARGS`` and wait for its "ready" line; kill it on failure."""
    cmd = [str(LLMSCALE), "emulate", "--port", "0", "--max-seconds", "300", *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    lines: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break  # exited
            lines.append(line.rstrip())
            if line.strip() == "ready":
                break
        if not lines or lines[-1] != "ready":
            raise RuntimeError("llmscale emulate did not start:\n" + "\n".join(lines))
        base = next(ln.split()[2] for ln in lines if ln.startswith("front door:"))
        replicas = {ln.split()[1].rstrip(":"): ln.split()[2] for ln in lines if ln.startswith("replica ")}
        return EmulateProcess(proc, base, replicas)
    except BaseException:
        stop_emulate(proc)
        raise


def stop_emulate(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the process group, wait, then SIGKILL whatever is left."""
    if proc.poll() is None:
        with_group(proc, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with_group(proc, signal.SIGKILL)
            proc.wait(5)
    if proc.stdout is not None:
        proc.stdout.close()


def with_group(proc: subprocess.Popen[str], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(proc.pid, sig)
