"""`llmscale tune` from the command line: the file it writes is one `backtest --policy-config`
reads and reproduces, a rerun continues the study, and the trials page renders in Chromium."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from llmscale.policies.config_file import load_policy_config
from llmscale.tune.report import CHART_IDS
from support.chromium import run_chromium

SRC = str(Path(__file__).resolve().parents[2] / "src")
#: ~380 requests/min of the azure-like preset at 1/10 rate for 10 minutes: a trial takes ~1 s
WORKLOAD = [
    "--workload", "azure-like", "--duration-s", "600", "--rate-scale", "0.1",
    "--min-replicas", "1", "--max-replicas", "12", "--initial-replicas", "2",
]  # fmt: skip


def _cli(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "LLMSCALE_PURE_PYTHON": "1"}
    return subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
    )


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("tune")
    out = base / "tuned.yaml"
    args = [*WORKLOAD, "--param", "target_utilization,alpha", "--out", str(out), "--jobs", "2"]
    run = _cli("tune", *args, "--trials", "4")
    return {"base": base, "out": out, "args": args, "run": run}


def test_tune_writes_the_policy_config_report_and_study(tuned):
    run = tuned["run"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert "4 trials in study 'slo' (4 run now)" in run.stdout, run.stdout
    out: Path = tuned["out"]
    assert out.is_file() and (tuned["base"] / "tuned-trials.html").is_file()
    assert (tuned["base"] / "tuned.optuna.db").is_file()
    doc = load_policy_config(out)  # the loader `backtest --policy-config` uses
    assert list(doc) == ["slo"] and set(doc["slo"]) == {"target_utilization", "alpha"}


def test_backtest_reproduces_the_best_trial_from_the_file(tuned):
    assert tuned["run"].returncode == 0, tuned["run"].stderr[-3000:]
    out: Path = tuned["out"]
    number = int(re.search(r"trial (\d+) of study", out.read_text()).group(1))
    study = optuna.load_study(study_name="slo", storage=f"sqlite:///{tuned['base'] / 'tuned.optuna.db'}")
    trial = study.trials[number]
    back = _cli(
        "backtest", *WORKLOAD, "--policy", "slo", "--policy-config", str(out), "--no-oracle", "--json", "-"
    )
    assert back.returncode == 0, back.stderr[-3000:]
    import json

    row = json.loads(back.stdout)["results"][0]
    assert row["gpu_hours"] == pytest.approx(trial.value, abs=1e-9)
    assert row["slo_attainment"] == pytest.approx(trial.user_attrs["attainment"], abs=1e-6)
    assert row["slo_attainment"] >= 0.99


def test_a_rerun_with_more_trials_continues(tuned):
    assert tuned["run"].returncode == 0, tuned["run"].stderr[-3000:]
    again = _cli("tune", *tuned["args"], "--trials", "6")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "6 trials in study 'slo' (2 run now)" in again.stdout, again.stdout
    other = _cli("tune", *tuned["args"], "--trials", "6", "--target-attainment", "0.9")
    assert other.returncode == 2 and "was run with other target_attainment" in other.stderr, other.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--trials", "0"], "--trials = 0, must be an integer in [1, 100000]", id="trials"),
        pytest.param(["--target-attainment", "1.5"], "--target-attainment = 1.5", id="target"),
        pytest.param(["--param", "nope"], "policy 'slo' has no parameter 'nope'", id="param"),
        pytest.param(["--policy", "sloo"], "--policy 'sloo' is not a policy", id="policy"),
        pytest.param(
            ["--out", "/nonexistent/dir/t.yaml"], "directory /nonexistent/dir does not exist", id="out"
        ),
    ],
)
def test_bad_options_exit_2_before_any_trial(args, message):
    out = _cli("tune", "--workload", "azure-like", *args, timeout_s=60)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_no_trace_is_refused():
    out = _cli("tune", timeout_s=60)
    assert out.returncode == 2 and "give at least one --trace or --workload" in out.stderr, out.stderr


def test_cli_start_imports_neither_optuna_nor_ray():
    code = "import sys, llmscale.cli; print(sorted(m for m in ('optuna', 'ray') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}
    )
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


@pytest.mark.browser
def test_the_trials_page_renders_in_chromium(tuned, tmp_path):
    assert tuned["run"].returncode == 0, tuned["run"].stderr[-3000:]
    page = tuned["base"] / "tuned-trials.html"
    text = page.read_text()
    assert "<script src=" not in text  # plotly.js inlined: the page opens offline
    dom = run_chromium(["--dump-dom", page.as_uri()], tmp_path / "profile")
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    html = dom.stdout.decode("utf-8", errors="replace")
    for cid in CHART_IDS:
        m = re.search(rf'<div id="{cid}" class="llmscale-chart[^"]*"[^>]*>', html)
        assert m, f"{cid}: no chart div"
        assert 'data-llmscale-rendered="ok"' in m.group(0), f"{cid}: not rendered: {m.group(0)}"
    assert html.count('class="main-svg"') >= 2 * len(CHART_IDS)
    assert 'class="llmscale-error"' not in html
    # one table row per finished trial (the rerun test may have added two)
    rows = re.findall(r'<tr><th scope="row">\d+</th>', html)
    assert len(rows) in (4, 6), len(rows)
