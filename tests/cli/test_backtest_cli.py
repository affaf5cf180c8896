"""`llmscale backtest` end to end, as a user runs it: the installed console script in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from llmscale.backtest.results import SUMMARY_KEYS

LLMSCALE = [sys.executable, "-m", "llmscale.cli"]


def run(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the CLI in its own process group; on a time-out the whole group (its worker
    processes too) is killed before the test fails."""
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.Popen(
        [*LLMSCALE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def check_doc(doc: dict, policies: list[str], oracle: bool) -> None:
    assert [r["policy"] for r in doc["results"]] == policies
    for row in doc["results"] + ([doc["oracle"]] if oracle else []):
        assert set(SUMMARY_KEYS) <= set(row)
        accounted = (
            row["completed"]
            + row["rejected"]
            + row["timed_out"]
            + row["killed_by_scale_down"]
            + row["in_flight_at_end"]
        )
        assert accounted == row["requests"] == doc["workload"]["requests"]
        assert 0.0 <= row["slo_attainment"] <= 1.0
        assert row["gpu_hours"] > 0
    if not oracle:
        assert doc["oracle"] is None


@pytest.mark.parametrize(
    ("trace", "fmt", "extra"),
    [
        pytest.param(
            "traces/azure_llm_2023_conv.csv", "auto", ["--rate-scale", "3", "--duration-s", "600"], id="azure"
        ),
        pytest.param(
            "traces/mooncake_synthetic_trace.jsonl",
            "mooncake",
            ["--model", "llama-3.1-8b", "--duration-s", "120"],
            id="mooncake",
        ),
        pytest.param(
            "traces/servegen/raw_m-small",
            "servegen",
            ["--start-s", "36000", "--duration-s", "300", "--rate-scale", "0.02"],
            id="servegen-raw",
        ),
        pytest.param(
            "traces/servegen/language_m-large_total_rate_10min.csv",
            "auto",
            ["--start-s", "0", "--duration-s", "600", "--rate-scale", "0.1"],
            id="servegen-total",
        ),
    ],
)
def test_replays_every_shared_trace_format(shared_data: Path, tmp_path: Path, trace, fmt, extra):
    out = tmp_path / "out.json"
    p = run(
        "backtest",
        "--trace",
        str(shared_data / trace),
        "--format",
        fmt,
        "--policy",
        "static,hpa-gpu-util",
        "--no-oracle",
        "--json",
        str(out),
        *extra,
    )
    assert p.returncode == 0, p.stderr
    check_doc(json.loads(out.read_text()), ["static", "hpa-gpu-util"], oracle=False)


def test_burstgpt_format_and_json_on_stdout(tmp_path: Path):
    trace = tmp_path / "burst.csv"
    rows = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    rows += [
        f"{i * 0.5:.1f},ChatGPT,{200 + i},{50 + i % 7},{250 + i + i % 7},Conversation log" for i in range(400)
    ]
    trace.write_text("\n".join(rows) + "\n")
    p = run("backtest", "--trace", str(trace), "--policy", "static", "--replicas", "2", "--json", "-")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # stdout holds the JSON alone
    check_doc(doc, ["static"], oracle=True)
    assert doc["workload"]["requests"] == 400


def test_bad_trace_line_is_named_with_exit_code_2(tmp_path: Path):
    trace = tmp_path / "bad.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0.0,10,5\n0.5,ten,5\n")
    p = run("backtest", "--trace", str(trace), "--no-oracle")
    assert p.returncode == 2
    assert "bad.csv" in p.stderr and "line 3" in p.stderr and "input_tokens" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(["--policy", "nope"], "nope", id="unknown-policy"),
        pytest.param(["--min-replicas", "5", "--max-replicas", "3"], "--max-replicas", id="bounds"),
        pytest.param(["--model", "gpt-9"], "gpt-9", id="unknown-model"),
        pytest.param(["--rate-scale", "0"], "--rate-scale", id="rate-scale"),
        pytest.param(
            ["--rate-shape", "wavy"], "--rate-shape = 'wavy', must be one of smooth, step", id="rate-shape"
        ),
        pytest.param(["--node-start-s", "-5"], "--node-start-s = -5.0", id="node-start"),
        pytest.param(["--max-nodes", "0"], "--max-nodes = 0", id="no-nodes"),
        pytest.param(
            ["--initial-replicas", "3", "--max-nodes", "2"],
            "--max-nodes = 2 is below --initial-replicas = 3",
            id="initial-fleet-over-the-pool",
        ),
    ],
)
def test_bad_options_exit_2_with_a_message(args, needle):
    p = run("backtest", "--workload", "flash-crowd", "--duration-s", "60", "--no-oracle", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert needle in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(["--trace", "/nonexistent/trace.csv"], "/nonexistent/trace.csv", id="missing-file"),
        pytest.param(["--trace", "x.csv", "--workload", "default"], "not both", id="trace-and-workload"),
        pytest.param(["--workload", "nope"], "nope", id="unknown-preset"),
    ],
)
def test_bad_workload_options_exit_2(args, needle):
    p = run("backtest", "--no-oracle", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert needle in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_no_arguments_runs_the_embedded_default_and_writes_the_report(tmp_path: Path):
    p = run("backtest", cwd=tmp_path, timeout=900)
    assert p.returncode == 0, p.stderr
    assert "oracle" in p.stdout and "hpa-gpu-util" in p.stdout and "static" in p.stdout
    report = tmp_path / "report.html"
    assert report.exists() and report.stat().st_size > 1_000_000


def test_node_pool_options_reach_the_json():
    """--node-start-s / --max-nodes model a node pool: each row reports its node-pending time."""
    p = run(
        "backtest",
        "--workload",
        "flash-crowd",
        "--duration-s",
        "120",
        "--policy",
        "keda-queue",
        "--initial-replicas",
        "1",
        "--node-start-s",
        "90",
        "--max-nodes",
        "3",
        "--no-oracle",
        "--json",
        "-",
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert (doc["config"]["sim_node_start_s"], doc["config"]["sim_max_nodes"]) == (90.0, 3)
    (row,) = doc["results"]
    # keda-queue scales up from one replica at once; every start waits at least 90 s for its node.
    assert row["node_pending_replica_s"] >= 90.0
