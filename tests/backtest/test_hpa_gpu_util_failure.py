"""The failure the design documents describe, reproduced: HPA on GPU utilisation under a
bandwidth-bound (decode-heavy) workload sees low utilisation while requests miss the SLO."""

from __future__ import annotations

from dataclasses import replace

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.workloads import make_preset, window


def test_hpa_on_gpu_util_reads_low_while_ttft_misses_the_slo():
    w = window(make_preset("bandwidth-bound", seed=0), 0.0, 900.0)
    s = replace(BacktestSettings(min_replicas=1, max_replicas=32, initial_replicas=3).with_cold_start())
    r = run_policy(w, "hpa-gpu-util", s)
    row, series = r.summary, r.series
    # GPU (SM) utilisation stays far below HPA's 70% target the whole time...
    assert row["mean_gpu_util"] < 0.35
    busy = [u for u in series["gpu_util"] if u is not None]
    assert max(busy) < 0.70
    # ...HBM bandwidth is busier than the SMs (decode streams weights and KV, little math)...
    bw = [u for u in series["bw_util"] if u is not None]
    assert sum(bw) / len(bw) > sum(busy) / len(busy)
    # ...and the service misses its SLO: HPA never scales up.
    assert row["slo_attainment"] < 0.9
    assert row["ttft_p99_s"] > s.slo_ttft_s
    assert max(series["desired_replicas"]) <= s.initial_replicas
