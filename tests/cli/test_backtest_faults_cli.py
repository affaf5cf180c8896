"""``llmscale backtest --burst-share --hbm-glitch --adaptive-batch``: through the CLI, in a subprocess."""

from __future__ import annotations

import json

import pytest
from test_backtest_edge_cases import backtest, refused

#: two minutes of the default preset on a fixed fleet: a few seconds a run
RUN = ["--workload", "default", "--duration-s", "120", "--policy", "static", "--replicas", "4"]
FAST = ["--no-oracle", "--jobs", "1", "--json", "-"]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        pytest.param(["--hbm-glitch", "30"], ["--hbm-glitch '30'", "START_S:DURATION_S"], id="glitch-form"),
        pytest.param(["--hbm-glitch", "30:60:2"], ["replica_share = 2.0"], id="glitch-share"),
        pytest.param(
            ["--hbm-glitch", "0:60", "--hbm-glitch", "30:60"], ["hbm glitch windows overlap"], id="overlap"
        ),
        pytest.param(["--burst-share", "1.5"], ["--burst-share = 1.5"], id="burst-share"),
    ],
)
def test_bad_fault_options_are_refused(args: list[str], needles: list[str]) -> None:
    refused(backtest(*RUN, *FAST, *args), *needles)


def test_faults_reach_the_simulator_and_the_json() -> None:
    healthy = json.loads(backtest(*RUN, *FAST).stdout)
    p = backtest(*RUN, *FAST, "--hbm-glitch", "30:60", "--adaptive-batch", "--burst-share", "0.75")
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert "sim_hbm_glitches" not in healthy["config"] and "sim_adaptive_batch" not in healthy["config"]
    (glitch,) = doc["config"]["sim_hbm_glitches"]
    assert glitch == {
        "start_s": 30.0,
        "duration_s": 60.0,
        "replica_share": 1.0,
        "retained_share": 0.0625,
        "period_s": 0.083,
        "duty": 0.17,
    }
    assert doc["config"]["sim_adaptive_batch"]["min_batch"] == 32
    ops = [t["op"] for t in doc["workload"]["source"]["transforms"]]
    assert ops[-1] == "entropy_bursts"
    assert doc["workload"]["requests"] == healthy["workload"]["requests"]
    # A minute of glitches on every replica slows decoding: the tail of TPOT grows.
    assert doc["results"][0]["tpot_p99_s"] > healthy["results"][0]["tpot_p99_s"]
