"""`llmscale calibrate --prometheus`: a live fleet's histograms, read through a real Prometheus.

The "deployed engine" is ``llmscale emulate`` running a profile whose memory bandwidth is 0.6x the
committed model's (a slower engine than the one llmscale assumes). Debian's Prometheus scrapes its
replica every second while ``loadgen`` streams a bounded load; ``calibrate`` then reads the
fleet's inter-token latency against its running batch over that range. The calibrated model's
decode step must be the slow engine's, and it must predict the measured inter-token latency
better than the committed one.
"""

from __future__ import annotations

import re
import statistics
import time

import pytest
import yaml
from e2e_procs import EmulateProcess, Proc, llmscale_command

from llmscale.perf.profile import CalibrationProfile
from support.prometheus_server import TargetGroup
from support.wait import wait_for

pytestmark = pytest.mark.slow


def test_calibrate_reads_a_live_fleet_through_prometheus(workdir, procs, prometheus_server):
    slow = workdir / "slow-engine.yaml"
    CalibrationProfile("llama-3-8b", "h100-80gb", 1, {"bandwidth": 0.6}).save(slow)
    emulate = procs(
        EmulateProcess, workdir, "--replicas", "1", "--cold-start-s", "0", "--calibration", str(slow),
        "--max-seconds", "150",
    )  # fmt: skip
    front = emulate.wait_ready()
    m = re.search(r"^replica \S+: http://(127\.0\.0\.1:\d+)", emulate.stdout(), re.M)
    assert m, emulate.tail()
    target = TargetGroup([m.group(1)], {"pod": "r0"})
    prom = prometheus_server(scrape_interval_s=1.0, static_targets=[target])
    prom.wait_for("up == 1", lambda r: len(r) == 1, timeout_s=30)

    start = time.time()
    loadgen = procs(
        Proc,
        "loadgen",
        [
            *llmscale_command(), "loadgen", "--target", front, "--workload", "default",
            "--rate-scale", "0.06", "--max-duration-s", "45", "--max-requests", "400",
            "--request-timeout-s", "60", "--seed", "3",
        ],
        workdir,
    )  # fmt: skip

    def itl_in_prometheus() -> bool:
        if not loadgen.running() and loadgen.proc.returncode not in (0, None):
            pytest.fail(f"loadgen failed\n{loadgen.tail()}")
        r = prom.query("sum(rate(vllm:inter_token_latency_seconds_count[20s]))")
        return bool(r) and float(r[0]["value"][1]) > 0

    wait_for("inter-token latencies in Prometheus", itl_in_prometheus, 60, every_s=0.2, context=loadgen.tail)
    assert loadgen.wait(90) == 0, loadgen.tail()
    end = time.time()

    out = workdir / "profile.yaml"
    cal = procs(
        Proc,
        "calibrate",
        [
            *llmscale_command(), "calibrate", "--prometheus", prom.url, "--start", f"{start:.0f}",
            "--end", f"{end:.0f}", "--step-s", "5", "--window", "20s", "--model", "llama-3-8b",
            "--gpu", "h100", "--tp", "1", "--out", str(out),
        ],
        workdir,
    )  # fmt: skip
    assert cal.wait(120) == 0, cal.tail()
    doc = yaml.safe_load(out.read_text())
    assert len(doc["points"]) >= 3, doc["points"]
    # At a small decode batch, weight streaming (bandwidth) and the per-step host work add up to
    # one step time that these data measure; how the fit splits the slow-down between the two
    # factors is the prior's choice. What it must get right is that step: the calibrated model's
    # decode step at the observed batch is the slow engine's, not the committed model's.
    from llmscale.perf.profile import load_profile
    from llmscale.perf.step_time import PerfModel

    truth = PerfModel(
        "llama-3-8b",
        "h100",
        1,
        CalibrationProfile("llama-3-8b", "h100-80gb", 1, {"bandwidth": 0.6}).coefficients(),
    )
    fitted = PerfModel("llama-3-8b", "h100", 1, load_profile(out).coefficients())
    committed = PerfModel("llama-3-8b", "h100", 1)
    for batch in (2, 4, 6):
        want = truth.decode(batch, 1500).duration_s
        got = fitted.decode(batch, 1500).duration_s
        assert abs(got / want - 1) < 0.12, (batch, got, want, doc["factors"])
        assert abs(committed.decode(batch, 1500).duration_s / want - 1) > 0.25
    assert doc["factors"]["bandwidth"] < 1.0 or doc["factors"]["host"] > 1.0, doc["factors"]
    after = statistics.median(abs(p["error_pct"]) for p in doc["points"])
    before = statistics.median(abs(p["uncalibrated_s"] / p["measured_s"] - 1) * 100 for p in doc["points"])
    assert after < before, (after, before, doc["factors"])
    assert "calibrate" in cal.name and "profile:" in cal.stdout()
