"""Model drift on real processes: ``llmscale emulate`` runs an engine the controllers' model does not know.

The emulated replica is started with a calibration profile whose HBM bandwidth factor is 0.6 (its
decode steps ~40% slower than the committed model's at these batches, see ``perf/drift.py``); two
``llmscale run`` controllers watch it in dry-run with no profile (factor 1), ``slo`` as policy:

* A, ``drift.adapt: false``: reports the ITL drift beyond 15% on its /metrics and in every decision
  line that has a ratio, and logs one warning line for it, not one per tick;
* B, ``drift.adapt: true`` (time constant 20 s so the test is short): its bandwidth factor moves
  toward 0.6 by at most 3% a tick and stays within [0.5, 2]; the model then predicts the fleet's
  ITL again (one "back within" line), and slo's capacity per replica lands closer to what the
  engine's true profile gives than the unadjusted model's.

``llmscale loadgen`` replays the azure-like preset at 3 req/s (x0.05), bounded to 150 s and 600
requests; every wait is for a condition, with a bound; every process is stopped after the test.
"""

from __future__ import annotations

import itertools
import math
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_procs import (
    EmulateProcess,
    Proc,
    decision_lines,
    llmscale_command,
    metric_value,
    write_config,
)

from support.prometheus_server import free_port
from support.wait import wait_for

pytestmark = [pytest.mark.slow]

MODEL, GPU = "llama-3-8b", "h100-80gb"
SLO_TTFT_S, SLO_TPOT_S = 2.0, 0.1


def _profile(workdir: Path) -> Path:
    path = workdir / "slow-hbm.yaml"
    doc = {
        "format": "llmscale calibration profile v1",
        "model": MODEL,
        "gpu": GPU,
        "tp": 1,
        "engine_name": "emulated engine with slower HBM",
        "factors": {"bandwidth": 0.6, "compute": 1.0, "host": 1.0, "comm": 1.0},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _controller(workdir: Path, name: str, front: str, drift: dict[str, Any]) -> tuple[Path, str]:
    port = free_port()
    config = write_config(
        workdir,
        {
            "target": {"name": name, "model": MODEL, "gpu": GPU},
            "metrics": {"source": "scrape", "scrape": {"emulate_url": front, "timeout_s": 2}},
            "policy": {"name": "slo"},
            "guards": {"min_replicas": 1, "max_replicas": 4},
            "tick_s": 2.0,
            "mode": "dry-run",
            "actuator": {"kind": "emulate", "emulate": {"url": front}},
            "server": {"listen": f"127.0.0.1:{port}"},
            "decision_log": {"path": str(workdir / f"{name}.jsonl")},
            "slo": {"ttft_s": SLO_TTFT_S, "tpot_s": SLO_TPOT_S},
            "drift": drift,
        },
        name=f"{name}.yaml",
    )
    return config, f"http://127.0.0.1:{port}"


def _itl_ratios(lines: list[dict[str, Any]]) -> list[float]:
    return [ln["drift"]["itl"]["ratio"] for ln in lines if ln.get("drift") and ln["drift"]["itl"]["ratio"]]


def test_run_reports_drift_and_adapts_toward_the_engine(workdir, procs):
    profile = _profile(workdir)
    emulate = procs(
        EmulateProcess, workdir, "--replicas", "1", "--calibration", str(profile), "--max-seconds", "300"
    )
    front = emulate.wait_ready()
    cfg_a, url_a = _controller(workdir, "fixed", front, {"adapt": False})
    cfg_b, url_b = _controller(workdir, "adapting", front, {"adapt": True, "time_constant_s": 20.0})
    run_a = procs(
        Proc, "run-fixed", [*llmscale_command(), "run", "--config", str(cfg_a), "--max-ticks", "150"], workdir
    )
    run_b = procs(
        Proc,
        "run-adapting",
        [*llmscale_command(), "run", "--config", str(cfg_b), "--max-ticks", "150"],
        workdir,
    )
    loadgen = procs(
        Proc,
        "loadgen",
        [
            *llmscale_command(), "loadgen", "--target", front, "--workload", "azure-like",
            "--rate-scale", "0.05", "--max-duration-s", "150", "--max-requests", "600",
            "--request-timeout-s", "60", "--seed", "1",
        ],
        workdir,
    )  # fmt: skip
    log_a, log_b = workdir / "fixed.jsonl", workdir / "adapting.jsonl"

    def context() -> str:
        brief = [
            (ln["drift"]["itl"]["ratio"], ln["drift"]["factors"]["bandwidth"], ln["drift"]["itl"]["note"])
            for ln in decision_lines(log_b)[-4:]
            if ln.get("drift")
        ]
        return "\n".join([run_a.tail(6), run_b.tail(6), loadgen.tail(4), emulate.tail(4), f"B: {brief}"])

    def alive() -> None:
        for p in (run_a, run_b, emulate):
            if not p.running():
                pytest.fail(f"{p.name} exited early\n{context()}")
        if not loadgen.running() and loadgen.proc.returncode != 0:
            pytest.fail(f"loadgen failed\n{loadgen.tail()}")

    # A: the drift is reported on /metrics once a window holds 2,000 tokens and 20 requests
    def drift_reported() -> float | None:
        alive()
        v = metric_value(url_a, "llmscale_model_drift_ratio", {"quantity": "itl"})
        return v if v is not None and v > 1.15 else None

    ratio_a = wait_for(
        "A's ITL drift ratio beyond 1.15 on /metrics", drift_reported, 120, every_s=0.2, context=context
    )
    assert ratio_a < 1.7, ratio_a  # bandwidth 0.6 costs these decode steps ~40%, not more

    # B: the bandwidth factor moves toward the engine's 0.6 ...
    def moved() -> float | None:
        alive()
        v = metric_value(url_b, "llmscale_model_factor", {"factor": "bandwidth"})
        return v if v is not None and v <= 0.85 else None

    wait_for("B's bandwidth factor at or below 0.85", moved, 120, every_s=0.2, context=context)

    # ... until its model predicts the fleet's ITL again (within the 10% the warning clears at)
    def back() -> dict[str, Any] | None:
        alive()
        for ln in decision_lines(log_b):
            r = ln.get("drift", {}).get("itl", {}).get("ratio")
            if ln.get("drift", {}).get("events", {}).get("itl") == "back":
                # the alarm clears below 1.10; the log rounds the ratio to 4 decimals (1.09996 -> 1.1)
                return ln if r is not None and r < 1.10 + 5e-5 else None
        return None

    back_line = wait_for("B's ITL drift back within 10%", back, 150, every_s=0.2, context=context)

    loadgen.stop()
    for run in (run_a, run_b):
        run.signal(signal.SIGTERM)
        assert run.wait(30) == 0, run.tail()

    # A: every ratio it reported is beyond 15%, its factors never moved, and it said so once
    lines_a = decision_lines(log_a)
    ratios_a = _itl_ratios(lines_a)
    assert len(ratios_a) >= 10 and all(r > 1.15 for r in ratios_a), ratios_a
    assert all(ln["drift"]["factors"]["bandwidth"] == 1.0 and not ln["drift"]["adapt"] for ln in lines_a)
    warnings_a = re.findall(
        r"WARNING .*model drift for default/fixed: observed mean inter-token", run_a.stderr()
    )
    assert len(warnings_a) == 1, run_a.stderr()[-3000:]
    assert "back within" not in run_a.stderr()

    # B: within [0.5, 2] of the start, at most 3% a tick (plus the 1% rounding the policies see)
    lines_b = [ln for ln in decision_lines(log_b) if ln.get("drift")]
    bws = [ln["drift"]["factors"]["bandwidth"] for ln in lines_b]
    assert all(0.5 <= b <= 2.0 for b in bws), bws
    steps = [abs(math.log(b / a)) for a, b in itertools.pairwise(bws)]
    assert max(steps) <= math.log(1.03) + 0.01 + 1e-9, steps
    assert min(bws) <= 0.85 and lines_b[-1]["drift"]["factors"]["host"] >= 1.0
    events_b = [ln["drift"].get("events", {}).get("itl") for ln in lines_b]
    assert events_b.count("drifting") == 1 and events_b.index("drifting") < events_b.index("back")
    assert len(re.findall(r"model drift for default/adapting is back within 10%", run_b.stderr())) >= 1

    # B's slo plans with the adjusted model: its capacity per replica is closer to the engine's
    # true one (the profile emulate runs) than the unadjusted model's, at the same request shape
    from llmscale.perf.replica_tails import fleet_bucket as _fleet_bucket
    from llmscale.perf.replica_tails import length_bucket as _bucket
    from llmscale.perf.replica_tails import tail_capacity_rps

    s = back_line["inputs"]
    shape = (
        MODEL,
        GPU,
        1,
        _bucket(s["prompt_tokens"]),
        _bucket(s["output_tokens"]),
        SLO_TTFT_S,
        SLO_TPOT_S,
        256,
        8192,
    )
    fleet = _fleet_bucket(int(s["planned_replicas"]))
    true_cap = tail_capacity_rps(*shape, str(profile), replicas=fleet)
    model_cap = tail_capacity_rps(*shape, replicas=fleet)
    planned = s["capacity_rps_per_replica"]
    assert abs(math.log(planned / true_cap)) < abs(math.log(model_cap / true_cap)), (
        planned,
        true_cap,
        model_cap,
    )
