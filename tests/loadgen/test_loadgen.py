"""loadgen against a real emulated fleet (in-process, real HTTP), and against targets that do not work."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.emulate import EmulateConfig, EmulatorThread
from llmscale.errors import ConfigError
from llmscale.loadgen import LoadgenError, LoadgenResult, Outcome, RequestRecord, run_loadgen
from llmscale.metrics.names import VllmMetric as V
from llmscale.workloads import Workload, load_trace

LLMSCALE = Path(sys.executable).with_name("llmscale")


@pytest.fixture
def fleet() -> Iterator[EmulatorThread]:
    with EmulatorThread(EmulateConfig(replicas=2, port=0)) as t:
        yield t


def _histogram_totals(fleet: EmulatorThread, name: str) -> tuple[float, float]:
    """(sum, count) of one histogram family over every replica's /metrics."""
    total_sum = total_count = 0.0
    with httpx.Client(timeout=10.0) as http:
        for port in fleet.call(lambda s: s.replica_ports()).values():
            text = http.get(f"http://127.0.0.1:{port}/metrics").text
            for family in text_string_to_metric_families(text):
                if family.name == name:
                    for s in family.samples:
                        total_sum += s.value if s.name == name + "_sum" else 0.0
                        total_count += s.value if s.name == name + "_count" else 0.0
    return total_sum, total_count


@pytest.mark.shared_data
def test_replays_a_slice_of_the_azure_trace_consistently_with_the_emulators_histograms(
    shared_data: Path, fleet: EmulatorThread
) -> None:
    w = load_trace(shared_data / "traces" / "azure_llm_2023_conv.csv", "auto")
    # 8 requests arriving over ~1.5 s; the longest answer (a few hundred tokens at ~12 ms) ends within ~10 s.
    result = run_loadgen(w, fleet.base_url + "/v1", max_requests=8, max_duration_s=45.0)
    assert result.planned == 8 and len(result.records) == 8
    assert (result.ok, result.errors, result.timeouts) == (8, 0, 0), [r.error for r in result.records]
    assert [r.tokens for r in result.records] == w.output_tokens[:8].tolist()
    p = result.percentiles("ttft_s")
    assert p["p50"] is not None and p["p95"] is not None and p["p99"] is not None
    assert p["p50"] <= p["p95"] <= p["p99"]
    # The emulator saw the same requests: its histograms count them, and its latencies are the
    # simulator's from the moment it received each request, so the client's (which include the HTTP
    # round trip and up to one 10 ms engine tick) are never lower and only a little higher on average.
    for metric, family in (("ttft_s", V.TTFT), ("e2e_s", V.E2E)):
        server_sum, server_count = _histogram_totals(fleet, family)
        assert server_count == 8
        client = result.values(metric)
        client_mean, server_mean = float(np.mean(client)), server_sum / server_count
        assert server_mean - 0.002 <= client_mean <= server_mean + 0.15, (metric, client_mean, server_mean)
    gen_tokens = 0.0
    with httpx.Client(timeout=10.0) as http:
        for port in fleet.call(lambda s: s.replica_ports()).values():
            for family in text_string_to_metric_families(http.get(f"http://127.0.0.1:{port}/metrics").text):
                if family.name == V.GENERATION_TOKENS.removesuffix("_total"):
                    gen_tokens += family.samples[0].value
    assert gen_tokens == sum(r.tokens for r in result.records)


def test_chat_replay_and_the_bounds(fleet: EmulatorThread) -> None:
    w = Workload.from_arrays("tiny", [0.0, 0.1, 0.2, 30.0], [100, 200, 300, 10], [5, 6, 7, 8])
    result = run_loadgen(
        w, fleet.base_url, max_requests=2, max_duration_s=20.0, chat=True, concurrency_limit=1
    )
    assert result.chat and result.planned == 2  # bounded by the count; the 30 s arrival is past the time
    assert [r.tokens for r in result.records] == [5, 6]
    # with one request at a time the second waits for the first to finish
    first, second = result.records
    assert first.e2e_s is not None and second.sent_s >= first.sent_s + first.e2e_s - 0.01


def test_time_bound_cuts_requests_still_running(fleet: EmulatorThread) -> None:
    w = Workload.from_arrays("long", [0.0], [10], [2000])  # ~25 s of decoding
    result = run_loadgen(w, fleet.base_url, max_requests=5, max_duration_s=1.0)
    assert (result.ok, result.timeouts) == (0, 1)
    assert result.wall_s < 5.0
    assert "max-duration" in result.records[0].error


def test_bad_targets_fail_cleanly() -> None:
    w = Workload.from_arrays("one", [0.0], [10], [2])
    with pytest.raises(LoadgenError, match="cannot reach the target"):
        run_loadgen(w, "http://127.0.0.1:9", max_requests=1, max_duration_s=5.0)
    with pytest.raises(ConfigError, match="expected an http"):
        run_loadgen(w, "127.0.0.1:8000", max_requests=1, max_duration_s=5.0)
    with pytest.raises(ConfigError, match="max_requests"):
        run_loadgen(w, "http://127.0.0.1:9", max_requests=0, max_duration_s=5.0)


def test_cli_reports_an_unreachable_target_without_a_traceback(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    Workload.from_arrays("one", [0.0], [10], [2]).to_csv(trace)
    proc = subprocess.run(
        [
            str(LLMSCALE),
            "loadgen",
            "--trace",
            str(trace),
            "--target",
            "http://127.0.0.1:9",
            "--max-requests",
            "1",
            "--max-duration-s",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "llmscale: error: cannot reach the target" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_percentiles_and_counts_of_a_result() -> None:
    ok = [RequestRecord(i, 0.0, 0.0, 1, 4, Outcome.OK, 4, 0.1 * (i + 1), 0.01, 1.0) for i in range(10)]
    bad = [
        RequestRecord(10, 0.0, 0.0, 1, 4, Outcome.ERROR, error="HTTP 503"),
        RequestRecord(11, 0.0, 0.0, 1, 4, Outcome.TIMEOUT, error="timed out"),
    ]
    r = LoadgenResult("http://x", "m", False, (*ok, *bad), 1.0, 12)
    assert (r.ok, r.errors, r.timeouts) == (10, 1, 1)
    p = r.percentiles("ttft_s")
    expected = np.percentile([0.1 * (i + 1) for i in range(10)], [50, 95, 99])
    assert [p["p50"], p["p95"], p["p99"]] == pytest.approx(expected.tolist())
    assert p["n"] == 10
    assert r.percentiles("tpot_s")["mean"] == pytest.approx(0.01)
    doc = r.as_json()
    assert doc["ok"] == 10 and doc["first_errors"] == ["HTTP 503", "timed out"]
    assert not math.isnan(doc["latency_s"]["e2e_s"]["p99"])
