"""`llmscale backtest` on requests longer than the model's context, in a subprocess as a user runs it.

vLLM answers such a request HTTP 400 before it reaches the engine, so none of
vLLM's metrics ever sees it. The backtest must do the same: reject it, count
it, say so before simulating, and let no policy (and none of the defaults the
CLI sizes from the workload) scale for it.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_backtest_cli import run

from llmscale.backtest.context_check import fmt_share
from llmscale.perf.catalogue import get_model
from llmscale.report.context import context_warning
from llmscale.workloads import LognormalLengths, Workload, flash_crowd, poisson

CONTEXT = get_model("llama-3-8b").max_context_tokens  # 8,192: the CLI's default model
#: Prompts of ~12,000 tokens: lognormal with sigma 0.05 stays within 12,000 x e^(+-0.3) (6 sigma)
#: = 8,900..16,200, all beyond 8,192 with any output; the tests count with the rule, not the hope.
LONG_PROMPTS = LognormalLengths(math.log(12_000), 0.05, math.log(200), 0.3)


def _traces(tmp_path: Path, *, duration_s: float, base_rps: float, long_rps: float) -> tuple[Path, Path, int]:
    """A flash crowd of ordinary requests mixed with a Poisson stream of too-long ones.

    Returns (mixed trace, the same trace with the too-long requests removed, how many were
    removed). Too-long requests before the first or after the last fitting one are dropped, so
    both traces span the same time axis (a Workload starts at 0) and end on the same request.
    """
    fit = flash_crowd(
        base_rps, duration_s, spike_start_s=0.4 * duration_s, spike_duration_s=0.2 * duration_s, seed=1
    )
    long = poisson(long_rps, duration_s, seed=2, lengths=LONG_PROMPTS)
    t = np.concatenate([fit.arrival_s, long.arrival_s])
    inp = np.concatenate([fit.input_tokens, long.input_tokens])
    out = np.concatenate([fit.output_tokens, long.output_tokens])
    order = np.argsort(t, kind="stable")
    t, inp, out = t[order], inp[order], out[order]
    over = inp + out > CONTEXT  # vLLM's rule: prompt + max_tokens > max_model_len -> HTTP 400
    fits = np.flatnonzero(~over)
    span = slice(int(fits[0]), int(fits[-1]) + 1)
    t, inp, out, over = t[span], inp[span], out[span], over[span]
    mixed, clean = tmp_path / "mixed.csv", tmp_path / "clean.csv"
    Workload.from_arrays("mixed", t, inp, out).to_csv(mixed)
    Workload.from_arrays("clean", t[~over], inp[~over], out[~over]).to_csv(clean)
    return mixed, clean, int(over.sum())


def _row(stdout: str, policy: str) -> list[str]:
    """The cells of ``policy``'s row of the terminal table (COLUMNS=200: one line per row)."""
    line = next(ln for ln in stdout.splitlines() if ln.lstrip().startswith(f"● {policy} "))
    return line.split()


def test_warns_counts_and_records_the_requests_beyond_the_context(tmp_path: Path) -> None:
    mixed, _clean, n_over = _traces(tmp_path, duration_s=120.0, base_rps=2.0, long_rps=1.0)
    requests = sum(1 for _ in mixed.open()) - 1
    share = n_over / requests
    assert 0.2 < share < 0.5, share  # the trace is what the test means: a large share too long
    out, report = tmp_path / "out.json", tmp_path / "report.html"
    p = run(
        "backtest", "--trace", str(mixed), "--policy", "static,slo", "--no-oracle",
        "--json", str(out), "--report", str(report),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    err = " ".join(p.stderr.split())  # rich wraps the warning at the console width
    assert "warning:" in err
    assert f"{n_over:,d} of {requests:,d} requests ({fmt_share(share)})" in err
    assert "llama-3.1-8b (131,072 tokens)" in err
    # Before simulating: the warning comes before the capacity probe's line.
    assert err.index("warning:") < err.index("one replica sustains")

    doc = json.loads(out.read_text())
    ctx = doc["workload"]["context"]
    assert ctx["model"] == "llama-3-8b"
    assert ctx["admitted_tokens"] == ctx["max_model_len_tokens"] == CONTEXT
    assert ctx["over_context_requests"] == n_over and ctx["requests"] == requests
    assert ctx["over_context_share"] == pytest.approx(share, abs=1e-6)
    assert ctx["long_context_models"][0] == {
        "model": "llama-3.1-8b",
        "admitted_tokens": 131_072,
        "over_context_requests": 0,
    }
    for row in doc["results"]:
        # Nothing else rejects here (the gateway queue is unbounded): every rejection is a too-long request.
        assert row["rejected"] == n_over, row
        assert row["completed"] + row["timed_out"] + row["killed_by_scale_down"] + row[
            "in_flight_at_end"
        ] == (requests - n_over)
        # A rejected request is an SLO miss (attainment is rounded to 1e-6 in the JSON).
        assert row["slo_attainment"] <= 1.0 - share + 1e-6
        assert _row(p.stdout, row["policy"])[-1] == f"{n_over:,d}"  # the table's Rejected column

    page = report.read_text()
    expected = context_warning(ctx)
    assert expected is not None
    assert f"<dt>context</dt><dd>{html.escape(expected)}</dd>" in page


def test_no_warning_when_every_request_fits(tmp_path: Path) -> None:
    _mixed, clean, _n = _traces(tmp_path, duration_s=60.0, base_rps=2.0, long_rps=1.0)
    p = run("backtest", "--trace", str(clean), "--policy", "static", "--no-oracle", "--json", "-")
    assert p.returncode == 0, p.stderr
    assert "warning:" not in p.stderr
    ctx = json.loads(p.stdout)["workload"]["context"]
    assert ctx["over_context_requests"] == 0 and ctx["long_context_models"] == []


def test_a_workload_no_replica_admits_exits_2_with_a_longer_context_model(tmp_path: Path) -> None:
    trace = tmp_path / "long.csv"
    poisson(1.0, 30.0, seed=2, lengths=LONG_PROMPTS).to_csv(trace)
    p = run("backtest", "--trace", str(trace), "--policy", "static", "--no-oracle")
    assert p.returncode == 2, (p.stdout, p.stderr)
    err = " ".join(p.stderr.split())
    assert "a backtest would reject them all" in err and "llama-3.1-8b (131,072 tokens)" in err
    assert "Traceback" not in p.stderr


#: Policies compared: ours (its forecast reads the served request rate and the prompt-length
#: mean), the fixed fleet the CLI sizes from the workload's peak minute, and two peers that
#: scale on the queue (KEDA) and on ongoing requests (Ray Serve).
POLICIES = ("slo", "static", "keda-queue", "ray-serve")


def test_requests_rejected_for_length_make_no_policy_scale(tmp_path: Path) -> None:
    """43% of the requests are too long; every policy pays for the rest exactly as without them.

    A rejection is decided on arrival, before routing, and schedules no event, so the mixed
    trace's fleet sees the same events as the clean one's, provided nothing a policy reads (or
    the CLI sizes from) counts the rejected requests. The GPU-hours are then equal up to the
    JSON's rounding, 1e-5 h (0.036 GPU-s); the smallest scaling the rejected share could cause,
    one replica more for one second, is 2.8e-4 h, 28 times that. Before the sizing counted only
    admitted requests, the CLI measured one replica's capacity at ~0 req/s on this trace and
    gave `static` 81,434 replicas.
    """
    mixed, clean, n_over = _traces(tmp_path, duration_s=300.0, base_rps=20.0, long_rps=20.0)
    docs = {}
    for name, trace in (("mixed", mixed), ("clean", clean)):
        out = tmp_path / f"{name}.json"
        p = run(
            "backtest", "--trace", str(trace), "--policy", ",".join(POLICIES), "--no-oracle",
            "--jobs", "1", "--json", str(out),
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        docs[name] = {r["policy"]: r for r in json.loads(out.read_text())["results"]}
    share = n_over / (n_over + docs["clean"]["slo"]["requests"])
    assert share > 0.3, share
    for policy in POLICIES:
        m, c = docs["mixed"][policy], docs["clean"][policy]
        assert m["rejected"] == n_over and c["rejected"] == 0
        assert m["gpu_hours"] <= c["gpu_hours"] + 1e-5, (policy, m["gpu_hours"], c["gpu_hours"])
        assert (m["replicas_max"], m["scale_events"]) == (c["replicas_max"], c["scale_events"]), policy
        assert m["completed"] == c["completed"], policy
    # Not vacuous: the flash crowd (x3 for a minute) makes the autoscalers scale.
    assert all(docs["clean"][p]["scale_events"] >= 1 for p in POLICIES if p != "static")


def test_zero_token_rows_are_replayed_as_one_token_and_the_cli_says_how_many(tmp_path):
    # Found from outside: a trace row with 0 prompt or 0 output tokens was silently replayed as 1.
    trace = tmp_path / "zeros.csv"
    trace.write_text(
        "timestamp,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:47.6805900,0,44\n"
        "2023-11-16 18:15:48.6805900,120,0\n"
        "2023-11-16 18:15:49.6805900,200,30\n"
    )
    p = run("backtest", "--trace", str(trace), "--policy", "static", "--no-oracle", timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "2 of 4 requests had 0 prompt or output tokens in the trace: replayed with 1" in p.stderr
    clean = tmp_path / "clean.csv"
    clean.write_text("timestamp,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    assert "0 prompt or output tokens" not in run("backtest", "--trace", str(clean), "--policy", "static",
                                                  "--no-oracle", timeout=300).stderr  # fmt: skip
