"""Issue 21's acceptance: every shared engine's rows fitted, and every profile runs in backtest and emulate.

The shared Argonne rows of Llama-2-7B, per engine and GPU (TP 1, 2 and 4 together), fitted on the
lengths 128, 512 and 2,048 with the engine's TTFT point where the TTFT file has one, predicting
the lengths 256 and 1,024 (whole configurations held out, not rows of a fitted one). Before
issue 21, 9 of 13 such profiles crashed every backtest and `emulate --calibration` (a compute
factor above the data sheet) and llama.cpp's rows were fitted as concurrent batches.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

CLI = [sys.executable, "-m", "llmscale.cli"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=900,
        env=dict(os.environ, COLUMNS="200"),
    )


def _emulate_serves(profile: Path, model: str, gpu: str, tp: int) -> str:
    """Start `emulate --calibration`, complete one request, return a replica's /metrics page; stop it."""
    proc = subprocess.Popen(
        [
            *CLI,
            "emulate",
            "--port",
            "0",
            "--max-seconds",
            "120",
            "--model",
            model,
            "--gpu",
            gpu,
            "--tp",
            str(tp),
            "--calibration",
            str(profile),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 90.0
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            if line.strip() == "ready":
                break
        assert lines and lines[-1] == "ready", "\n".join(lines)
        front = next(ln.split()[2] for ln in lines if ln.startswith("front door:"))
        served = next(ln for ln in lines if ln.startswith("front door:")).split("(model ")[1].rstrip(")")
        replica = next(ln.split()[2] for ln in lines if ln.startswith("replica "))
        body = json.dumps({"model": served, "prompt": "hello there", "max_tokens": 8}).encode()
        req = urllib.request.Request(
            front + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
        with urllib.request.urlopen(replica + "/metrics", timeout=30) as r:
            return r.read().decode()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("framework", "gpu", "emulate_gpu"),
    [
        pytest.param("TensorRT-LLM", "h100", "h100-80gb", id="trt-llm-h100"),
        pytest.param("TensorRT-LLM", "a100-40gb", "a100-40gb", id="trt-llm-a100"),
        pytest.param("TensorRT-LLM", "gh200", "gh200", id="trt-llm-gh200"),
        pytest.param("Deepspeed-MII", "a100-40gb", "a100-40gb", id="deepspeed-mii-a100"),
    ],
)
def test_each_engine_fitted_on_three_lengths_predicts_the_others_and_runs(
    shared_data: Path, tmp_path: Path, framework: str, gpu: str, emulate_gpu: str
) -> None:
    argonne = shared_data / "calibration" / "argonne"
    out = tmp_path / "profile.yaml"
    r = _cli(
        "calibrate",
        str(argonne / "e2e_batch_latency.csv"),
        str(argonne / "ttft_batch16_in1024.csv"),
        "--framework",
        framework,
        "--model",
        "llama-2-7b",
        "--gpu",
        gpu,
        "--holdout",
        "256,1024",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(out.read_text())
    held = [p for p in doc["points"] if not p["fitted"]]
    assert {int(p["label"].split(" in")[1].split()[0]) for p in held} == {256, 1024}
    assert statistics.median(abs(p["error_pct"]) for p in held) <= 10.0, doc["factors"]
    ttft = [p for p in doc["points"] if p["label"].endswith(" ttft")]
    assert len(ttft) == 1 and abs(ttft[0]["error_pct"]) <= 10.0, ttft
    # compute is pinned by that TTFT point, and said so
    assert "compute" in doc["uncertainty"]
    assert any("ttft" in row for row in doc["uncertainty"]["compute"]["determined_by"])
    assert "warning" not in r.stderr

    bt = _cli(
        "backtest",
        "--workload",
        "default",
        "--duration-s",
        "30",
        "--policy",
        "static",
        "--replicas",
        "2",
        "--no-oracle",
        "--model",
        "llama-2-7b",
        "--gpu",
        emulate_gpu,
        "--calibration",
        str(out),
        cwd=tmp_path,
    )
    assert bt.returncode == 0, bt.stderr
    page = _emulate_serves(out, "llama-2-7b", emulate_gpu, 1)
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" in page


@pytest.mark.shared_data
def test_llama_cpp_rows_are_recognised_and_refused(shared_data: Path, tmp_path: Path) -> None:
    """Its "batch size" is the prompt batch of one sequence: latency falls from batch 1 to 64."""
    r = _cli(
        "calibrate",
        str(shared_data / "calibration" / "argonne" / "e2e_batch_latency.csv"),
        "--framework",
        "llama.cpp",
        "--model",
        "llama-2-7b",
        "--gpu",
        "h100",
        "--out",
        str(tmp_path / "p.yaml"),
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stdout
    assert "Traceback" not in r.stderr
    assert "latency falls with batch size" in r.stderr
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.shared_data
def test_the_docs_calibration_example_is_what_calibrate_prints(shared_data: Path, tmp_path: Path) -> None:
    """docs/calibration.md quotes the TensorRT-LLM H100 example's held-out error; the fit has one answer."""
    import re

    page = (Path(__file__).resolve().parents[2] / "docs" / "calibration.md").read_text()
    m = re.search(r"are predicted within ([\d.]+)% median \(([\d.]+)% before\)", page)
    assert m, "docs/calibration.md's worked example moved"
    r = _cli(
        "calibrate",
        str(shared_data / "calibration" / "argonne" / "e2e_batch_latency.csv"),
        "--framework",
        "TensorRT-LLM",
        "--model",
        "llama-2-7b",
        "--gpu",
        "h100",
        "--holdout",
        "256,1024",
        "--out",
        str(tmp_path / "p.yaml"),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("held out: median |error|"))
    assert f"{m.group(1)}% (uncalibrated {m.group(2)}%)" in line, (line, m.groups())
