"""Headless Debian chromium for the page-rendering tests (report, analyze, tune pages).

Offline (no DNS at all: a page that needs a CDN would render blank charts), in its own session
so that exactly its zygote and renderer processes are ended afterwards, and bounded in time.
``LLMSCALE_TEST_CHROMIUM`` points the tests at another binary.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

__all__ = ["CHROMIUM", "chromium", "run_chromium"]

CHROMIUM = Path(os.environ.get("LLMSCALE_TEST_CHROMIUM", "/usr/bin/chromium"))


def chromium() -> Path:
    """The binary, or a failure saying how to install it (CI installs it: never a skip)."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} not found: the page rendering tests need Debian's chromium. "
            "Install it with: bash scripts/install_chromium.sh"
        )
    return CHROMIUM


def run_chromium(
    args: list[str], profile: Path, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[bytes]:
    """Run headless chromium with ``args``; kill its whole process group on timeout or exit."""
    cmd = [
        str(chromium()),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {timeout_s:.0f} s: {' '.join(cmd)}")
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers of *our* chromium only
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
