"""`llmscale calibrate`: profiles fitted to a user's engine, read back, and used by the backtest."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmscale.errors import ConfigError, TraceFormatError
from llmscale.offline.calibrate import calibrate, read_closed_batches, read_serve_result
from llmscale.offline.closed_batch import EngineSettings, schedule
from llmscale.perf import get_perf_model
from llmscale.perf.profile import CalibrationProfile, load_profile

CLI = [sys.executable, "-m", "llmscale.cli"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env=dict(os.environ, COLUMNS="200"),
    )


@pytest.mark.shared_data
def test_trt_llm_profile_fitted_on_three_lengths_predicts_the_other_two(
    shared_data: Path, tmp_path: Path
) -> None:
    """The issue's acceptance: TensorRT-LLM, a faster engine than the default profile, one model and GPU."""
    csv = shared_data / "calibration" / "argonne" / "e2e_batch_latency.csv"
    out = tmp_path / "trt.yaml"
    r = _cli(
        "calibrate",
        str(csv),
        "--framework",
        "TensorRT-LLM",
        "--model",
        "llama-2-7b",
        "--gpu",
        "h100",
        "--hold-out-lengths",
        "256,1024",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(out.read_text())
    held = [p for p in doc["points"] if not p["fitted"]]
    fitted = [p for p in doc["points"] if p["fitted"]]
    lengths = {int(p["label"].split(" in")[1].split()[0]) for p in held}
    assert lengths == {256, 1024}
    assert {int(p["label"].split(" in")[1].split()[0]) for p in fitted} == {128, 512, 2048}
    held_err = statistics.median(abs(p["error_pct"]) for p in held)
    before = statistics.median(abs(p["uncalibrated_s"] / p["measured_s"] - 1) * 100 for p in held)
    assert held_err <= 10.0, (held_err, doc["factors"])
    # It is the calibration that does it: the committed vLLM profile is far off for this engine.
    assert before > 2 * held_err
    # TensorRT-LLM's C++ runtime spends less host time per iteration than vLLM's Python loop.
    assert doc["factors"]["host"] < 1.0
    assert "held out: median |error|" in r.stdout
    profile = load_profile(out)
    assert profile.engine_name == "TensorRT-LLM"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_closed_batch_csv_errors_name_the_file_line_and_column(tmp_path: Path) -> None:
    header = "model,gpu,tp,input_tokens,output_tokens,batch_size,latency_s\n"
    bad = _write(
        tmp_path / "b.csv", header + "llama-2-7b,h100,1,128,128,1,0.9\nllama-2-7b,h100,1,128,abc,1,0.9\n"
    )
    with pytest.raises(TraceFormatError, match=r"b\.csv:3: output_tokens = 'abc'"):
        read_closed_batches(bad, model=None, gpu=None, tp=None, framework=None, engine=EngineSettings())
    neg = _write(tmp_path / "n.csv", header + "llama-2-7b,h100,1,128,128,1,-2\n")
    with pytest.raises(TraceFormatError, match=r"n\.csv:2: latency_s"):
        read_closed_batches(neg, model=None, gpu=None, tp=None, framework=None, engine=EngineSettings())
    missing = _write(tmp_path / "m.csv", "model,latency_s\nx,1\n")
    with pytest.raises(TraceFormatError, match="missing column"):
        read_closed_batches(missing, model=None, gpu=None, tp=None, framework=None, engine=EngineSettings())
    nomodel = _write(tmp_path / "o.csv", "input_tokens,output_tokens,batch_size,latency_s\n128,128,1,0.9\n")
    with pytest.raises(TraceFormatError, match="--model, --gpu and --tp"):
        read_closed_batches(nomodel, model=None, gpu=None, tp=None, framework=None, engine=EngineSettings())
    unknown = _write(tmp_path / "u.csv", header + "gpt-9,h100,1,128,128,1,0.9\n")
    with pytest.raises(TraceFormatError, match=r"u\.csv:2: model = 'gpt-9' is unknown"):
        read_closed_batches(unknown, model=None, gpu=None, tp=None, framework=None, engine=EngineSettings())


def test_a_synthetic_engine_is_recovered(tmp_path: Path) -> None:
    """Measurements made by a known profile (bandwidth x1.1, host x0.5) give those factors back."""
    from llmscale.perf.profile import scale_coefficients
    from llmscale.perf.step_time import PerfModel

    truth = {"bandwidth": 1.1, "host": 0.5, "compute": 1.0, "comm": 1.0}
    pm = PerfModel(
        "llama-3-8b", "h100", 1, scale_coefficients(get_perf_model("llama-3-8b", "h100", 1).coeffs, truth)
    )
    rows = ["model,gpu,tp,input_tokens,output_tokens,batch_size,latency_s"]
    for length in (128, 512, 1024):
        for batch in (1, 16, 64):
            lat = schedule("llama-3-8b", "h100", 1, length, length, batch, EngineSettings()).makespan_s(pm)
            rows.append(f"llama-3-8b,h100,1,{length},{length},{batch},{lat}")
    f = _write(tmp_path / "synthetic.csv", "\n".join(rows) + "\n")
    targets = read_closed_batches(f, model=None, gpu=None, tp=None, framework=None, engine=EngineSettings())
    prof = calibrate(targets, engine=EngineSettings(), engine_name="synthetic", sources=[str(f)])
    assert prof.factor("bandwidth") == pytest.approx(1.1, rel=0.03)
    assert prof.factor("host") == pytest.approx(0.5, rel=0.08)
    assert max(abs(p.error_pct) for p in prof.points) < 1.0


def test_serve_result_json_gives_an_itl_target(tmp_path: Path) -> None:
    # A vllm bench serve result: 4 requests, ~2 in flight on average over a 10 s run.
    doc = {
        "duration": 10.0,
        "input_lens": [512, 512, 512, 512],
        "output_lens": [200, 200, 200, 200],
        "ttfts": [0.05, 0.05, 0.05, 0.05],
        "itls": [[0.02] * 199, [0.02] * 199, [0.025] * 199, [0.025] * 199],
        "errors": ["", "", "", ""],
        "model_id": "meta-llama/Meta-Llama-3-8B",
    }
    f = _write(tmp_path / "serve.json", json.dumps(doc))
    (t,) = read_serve_result(f, model=None, gpu="h100", tp=1)
    assert t.measured_s == pytest.approx(0.0225)
    assert "in flight" in t.label
    assert 0.002 < t.predict(get_perf_model("llama-3-8b", "h100", 1)) < 0.05
    with pytest.raises(ConfigError, match="--gpu and --tp"):
        read_serve_result(f, model=None, gpu=None, tp=None)
    doc["ttfts"] = ["x", 0.05, 0.05, 0.05]
    with pytest.raises(TraceFormatError, match="request 0: ttfts"):
        read_serve_result(_write(tmp_path / "bad.json", json.dumps(doc)), model=None, gpu="h100", tp=1)
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        read_serve_result(_write(tmp_path / "x.json", "{"), model=None, gpu="h100", tp=1)


def test_profile_files_are_validated(tmp_path: Path) -> None:
    good = CalibrationProfile("llama-3-8b", "h100-80gb", 1, {"bandwidth": 1.1, "host": 0.7})
    good.save(tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml").factor("bandwidth") == pytest.approx(1.1)
    for text, msg in (
        ("format: nope\n", "format"),
        ("format: llmscale calibration profile v1\ntp: 1\nfactors: {bandwidth: .nan}\n", "bandwidth"),
        ("format: llmscale calibration profile v1\ntp: 1\nfactors: {speed: 2}\n", "speed"),
        ("format: llmscale calibration profile v1\ntp: 1\nfactors: {host: 50}\n", "host"),
        ("format: llmscale calibration profile v1\ntp: 1\nfactors: {kv_reread: 2}\n", "kv_reread"),
        ("format: llmscale calibration profile v1\ntp: x\nfactors: {}\n", "tp"),
        ("[unclosed", "YAML"),
    ):
        p = _write(tmp_path / f"bad{abs(hash(text))}.yaml", text)
        with pytest.raises(ConfigError, match=msg):
            load_profile(p)
    with pytest.raises(ConfigError, match="not found"):
        load_profile(tmp_path / "missing.yaml")


def test_backtest_uses_the_profile(tmp_path: Path) -> None:
    """A profile whose engine spends a third of vLLM's host time gives a faster fleet in the backtest."""
    fast = tmp_path / "fast.yaml"
    CalibrationProfile("llama-3-8b", "h100-80gb", 1, {"bandwidth": 1.1, "host": 0.3}).save(fast)
    runs = {}
    for name, extra in (("base", []), ("fast", ["--calibration", str(fast)])):
        out = tmp_path / f"{name}.json"
        r = _cli(
            "backtest",
            "--workload",
            "default",
            "--duration-s",
            "120",
            "--policy",
            "static",
            "--replicas",
            "6",
            "--no-oracle",
            "--json",
            str(out),
            *extra,
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stderr
        runs[name] = json.loads(out.read_text())["results"][0]
    assert runs["fast"]["tpot_p50_s"] < 0.8 * runs["base"]["tpot_p50_s"]
    bad = _write(tmp_path / "bad.yaml", "format: nope\n")
    r = _cli(
        "backtest", "--workload", "default", "--duration-s", "60", "--calibration", str(bad), cwd=tmp_path
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and "bad.yaml" in r.stderr
