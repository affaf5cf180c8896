"""`llmscale backtest` says how it scaled a trace (``--scale-mode``) and which lengths a rate-only
trace was replayed with (``--lengths``); bad lengths are refused naming the field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(os.environ.get("LLMSCALE_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
AZURE = DATA / "traces" / "azure_llm_2023_conv.csv"
CLIENTS = DATA / "traces" / "servegen" / "raw_m-small"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *args], capture_output=True, text=True, env=env, timeout=900
    )


FAST = ["--policy", "static", "--no-oracle", "--jobs", "1", "--duration-s", "60"]


@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("mode_args", "printed"),
    [
        pytest.param([], "--scale-mode users: 2 x the users", id="default-users"),
        pytest.param(["--scale-mode", "burst"], "--scale-mode burst: the same users", id="burst"),
    ],
)
def test_the_run_prints_how_it_scaled(mode_args: list[str], printed: str) -> None:
    if not AZURE.is_file():
        pytest.skip(f"needs {AZURE} (../shared/data)")
    p = run("backtest", "--trace", str(AZURE), "--rate-scale", "2", *mode_args, *FAST)
    assert p.returncode == 0, p.stderr
    assert printed in " ".join(p.stderr.split())


@pytest.mark.shared_data
def test_a_client_folder_prints_its_lengths() -> None:
    if not CLIENTS.is_dir():
        pytest.skip(f"needs {CLIENTS} (../shared/data)")
    # m-small's clients: ~1,200 req/s, thinned to a few a second
    base = ["backtest", "--trace", str(CLIENTS), "--rate-scale", "0.003", *FAST]
    p = run(*base)
    assert p.returncode == 0, p.stderr
    assert "no lengths: prompt 120 / output 15 tokens (lognormal, CV 1.31 / 1.31), assumed" in " ".join(
        p.stderr.split()
    )
    p = run(*base, "--lengths", "prompt=600:1.2,output=1500", "--json", "-")
    assert p.returncode == 0, p.stderr
    assert "prompt 600 / output 1,500 tokens (lognormal, CV 1.20 / 1.31), given by --lengths" in " ".join(
        p.stderr.split()
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        pytest.param(["--workload", "default", "--lengths", "prompt=5"], "output missing", id="missing"),
        pytest.param(["--workload", "default", "--scale-mode", "crowd"], "--scale-mode = 'crowd'", id="mode"),
        pytest.param(["--workload", "default", "--lengths", "m-large"], "not to --workload", id="preset"),
    ],
)
def test_bad_options_are_named(args: list[str], named: str) -> None:
    p = run("backtest", *args, "--no-oracle")
    assert p.returncode != 0
    assert named in p.stderr
