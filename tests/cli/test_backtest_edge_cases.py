"""Malformed input to ``llmscale backtest``, each found from outside on a fresh clone, through the CLI.

Every one of these used to end in a traceback, a run that never ended, or a plausible but
wrong result. Now each is refused before any simulation with exit code 2 and one line naming
the file, line and field (traces) or the option (options), or, where the input is valid after
all (epoch-second timestamps), read correctly.

Each run is a subprocess (its own process group, killed on a time-out): the time-outs are far
above what a refusal takes (about a second) and far below what the old behaviour took, so a
hang fails the test instead of stalling it.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

LLMSCALE = [sys.executable, "-m", "llmscale.cli", "backtest"]
#: the capacity probe prints this after the workload loads and before the first simulation
PROBE_LINE = "one replica sustains"
#: a fast valid run: one policy, no oracle, one process
FAST = ["--policy", "slo", "--no-oracle", "--jobs", "1"]


def backtest(
    *args: str | Path, cwd: Path | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.Popen(
        [*LLMSCALE, *map(str, args)],
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
        pytest.fail(f"llmscale backtest {' '.join(map(str, args))} still running after {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def refused(p: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit code 2, one error line on stderr containing every needle, no traceback; the line."""
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("llmscale: error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], p.stderr[-2000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


PLAIN = "arrival_s,input_tokens,output_tokens\n"
MOONCAKE_OK = '{"timestamp": 0, "input_length": 100, "output_length": 20}\n'


# ---- tracebacks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "line", "field"),
    [
        pytest.param("t.csv", PLAIN + "0,100,1e30\n1,100,20\n", 2, "output_tokens", id="csv-1e30-tokens"),
        pytest.param(
            "t.csv", PLAIN + "0,100,20\n1,9223372036854775808,20\n", 3, "input_tokens", id="csv-2^63-tokens"
        ),
        pytest.param(
            "t.jsonl",
            MOONCAKE_OK + '{"timestamp": 10, "input_length": 9223372036854775808, "output_length": 5}\n',
            2,
            "input_length",
            id="mooncake-2^63-tokens",
        ),
        pytest.param(
            "t.jsonl",
            MOONCAKE_OK + '{"timestamp": 10, "input_length": 10, "output_length": 1e30}\n',
            2,
            "output_length",
            id="mooncake-1e30-tokens",
        ),
        pytest.param("t.csv", PLAIN + "0,100,20\n1e300,100,20\n", 3, "arrival_s", id="arrival-1e300"),
    ],
)
def test_out_of_range_trace_values_are_named_at_their_line(tmp_path, name, text, line, field):
    p = backtest("--trace", write(tmp_path / name, text), *FAST)
    refused(p, name, f"line {line}", f"field '{field}'")
    assert PROBE_LINE not in p.stderr


def test_rate_scale_refuses_with_its_memory_estimate_before_allocating(tmp_path):
    # 20 requests x 1e9 used to ask numpy for 149 GiB.
    trace = write(tmp_path / "t.csv", PLAIN + "".join(f"{i},100,20\n" for i in range(20)))
    line = refused(backtest("--trace", trace, "--rate-scale", "1e9", *FAST), "--rate-scale", "GiB")
    assert "20,000,000,000 requests" in line


@pytest.mark.parametrize(
    ("option", "target"),
    [
        pytest.param("--json", "missing-dir/out.json", id="json-missing-dir"),
        pytest.param("--report", "missing-dir/report.html", id="report-missing-dir"),
        pytest.param("--decisions", ".", id="decisions-is-a-directory"),
        pytest.param("--json", "a-file/out.json", id="json-under-a-file"),
    ],
)
def test_unwritable_output_paths_are_refused_before_the_simulation(tmp_path, option, target):
    write(tmp_path / "a-file", "not a directory")
    p = backtest("--workload", "flash-crowd", "--duration-s", "120", *FAST, option, target, cwd=tmp_path)
    refused(p, option, target)
    # Refused before the workload was even sized: the old failure came after the whole run.
    assert PROBE_LINE not in p.stderr


@pytest.mark.parametrize(
    ("yaml_text", "needles"),
    [
        pytest.param("slo:\n  target_utilization: abc\n", ["slo.target_utilization", "'abc'"], id="string"),
        pytest.param("slo:\n  trend_ticks: [1, 2]\n", ["slo.trend_ticks", "integer"], id="list"),
        pytest.param("slo:\n  tick_s: true\n", ["slo.tick_s"], id="bool"),
        pytest.param(
            "slo:\n  target_utilization: 0\n", ["slo.target_utilization = 0", "[0.01, 1]"], id="tu-0"
        ),
        pytest.param("slo:\n  target_utilization: .nan\n", ["slo.target_utilization = nan"], id="tu-nan"),
        pytest.param(
            "slo:\n  guards: {cooldown_up_s: soon}\n", ["slo.guards.cooldown_up_s"], id="guard-type"
        ),
    ],
)
def test_policy_config_types_and_ranges_name_the_file_and_key(tmp_path, yaml_text, needles):
    config = write(tmp_path / "policies.yaml", yaml_text)
    p = backtest("--workload", "flash-crowd", "--duration-s", "60", *FAST, "--policy-config", config)
    refused(p, "--policy-config", "policies.yaml", *needles)
    assert PROBE_LINE not in p.stderr


# ---- hangs -----------------------------------------------------------------------------------------


def test_a_trace_spanning_a_billion_seconds_is_refused_with_the_limit(tmp_path):
    # Two requests 1e9 s apart: the controller would tick 6.7e7 times.
    trace = write(tmp_path / "t.csv", PLAIN + "0,100,20\n1e9,100,20\n")
    line = refused(backtest("--trace", trace, *FAST, timeout=60), "t.csv", "line 3", "field 'arrival_s'")
    assert "2,678,400 s (31.0 days)" in line and "--duration-s" in line


def test_a_window_of_a_long_trace_replays(tmp_path):
    trace = write(tmp_path / "t.csv", PLAIN + "0,100,20\n5,120,30\n1e9,100,20\n")
    p = backtest("--trace", trace, *FAST, "--duration-s", "60", "--json", "-", timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["workload"]["requests"] == 2


def test_azure_epoch_second_timestamps_are_read_as_seconds(tmp_path):
    # Numpy read 1700000000 as the year 1,700,000,000 and wrapped it: a replay that never ended.
    trace = write(
        tmp_path / "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n1700000000,100,20\n1700000002,200,30\n1700000005,50,10\n",
    )
    p = backtest("--trace", trace, *FAST, "--json", "-", timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    workload = json.loads(p.stdout)["workload"]
    assert workload["requests"] == 3 and workload["duration_s"] == 5.0
    assert workload["source"]["timestamps"] == "epoch seconds"


# ---- silently wrong results ------------------------------------------------------------------------


def test_numeric_azure_timestamps_are_not_years(tmp_path):
    # "2023" and "2024" were read as years: two requests, a year apart, 8,760 GPU-hours.
    trace = write(
        tmp_path / "azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023,100,20\n2024,100,20\n"
    )
    p = backtest("--trace", trace, *FAST, "--json", "-", timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["workload"]["duration_s"] == 1.0
    assert doc["results"][0]["gpu_hours"] < 1.0


def test_azure_epoch_milliseconds_are_refused_as_a_unit_slip(tmp_path):
    trace = write(
        tmp_path / "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n1700000000000,100,20\n1700000000500,1,1\n",
    )
    refused(backtest("--trace", trace, *FAST), "azure.csv", "line 2", "TIMESTAMP", "milliseconds")


@pytest.mark.parametrize("option", ["--slo-ttft-s", "--slo-tpot-s"])
def test_nan_slo_is_refused(option):
    # --slo-ttft-s nan gave 0% attainment with every request completed.
    p = backtest("--workload", "flash-crowd", "--duration-s", "60", *FAST, option, "nan")
    refused(p, option, "nan")


def test_a_misspelt_policy_in_the_policy_config_is_refused(tmp_path):
    config = write(tmp_path / "policies.yaml", "sloo:\n  target_utilization: 0.5\n")
    p = backtest("--workload", "flash-crowd", "--duration-s", "60", *FAST, "--policy-config", config)
    refused(p, "policies.yaml", "sloo", "unknown policy", "did you mean 'slo'")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        pytest.param("true", "true is a JSON boolean", id="true"),
        pytest.param('"100"', '"100" is a JSON string', id="str"),
    ],
)
def test_mooncake_token_counts_must_be_json_numbers(tmp_path, value, shown):
    trace = write(
        tmp_path / "t.jsonl",
        MOONCAKE_OK + f'{{"timestamp": 10, "input_length": {value}, "output_length": 5}}\n',
    )
    refused(backtest("--trace", trace, *FAST), "t.jsonl", "line 2", "field 'input_length'", shown)


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        pytest.param("truncate", "corrupt gzip file", id="truncated"),
        pytest.param("flip", "corrupt gzip file", id="flipped-byte"),
        pytest.param("plain", "not a gzip file", id="not-gzip"),
    ],
)
def test_a_corrupt_gzip_is_said_to_be_corrupt(tmp_path, damage, needle):
    raw = gzip.compress((PLAIN + "".join(f"{i},100,20\n" for i in range(200))).encode())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "flip":
        raw = raw[:20] + bytes([raw[20] ^ 0xFF]) + raw[21:]
    else:
        raw = b"arrival_s,input_tokens,output_tokens\n"
    trace = tmp_path / "t.csv.gz"
    trace.write_bytes(raw)
    line = refused(backtest("--trace", trace, *FAST), "t.csv.gz", needle)
    assert "empty file" not in line


def test_negative_guard_steps_are_refused(tmp_path):
    # max_down_step -3 put the rate limit's floor above the fleet: a wish for 1 replica became 13.
    config = write(tmp_path / "policies.yaml", "slo:\n  guards:\n    max_down_step: -3\n")
    p = backtest("--workload", "flash-crowd", "--duration-s", "60", *FAST, "--policy-config", config)
    refused(p, "policies.yaml", "slo.guards.max_down_step = -3", ">= 0")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        pytest.param(["--timeout-s", "nan"], "--timeout-s", id="timeout-nan"),
        pytest.param(["--grace-s", "-1"], "--grace-s", id="grace-negative"),
        pytest.param(["--start-s", "nan"], "--start-s", id="start-nan"),
        pytest.param(["--duration-s", "-5"], "--duration-s", id="duration-negative"),
        pytest.param(["--max-replicas", "100000000"], "--max-replicas", id="max-replicas-huge"),
        pytest.param(["--tp", "3"], "--tp", id="tp"),
        pytest.param(["--router", "random"], "--router", id="router"),
        pytest.param(["--seed", "-1"], "--seed", id="seed"),
    ],
)
def test_other_options_out_of_range_name_the_option(args, option):
    p = backtest("--workload", "flash-crowd", "--duration-s", "60", *FAST, *args)
    refused(p, option)
    assert PROBE_LINE not in p.stderr


@pytest.mark.parametrize(
    ("yaml_text", "needles"),
    [
        pytest.param(
            "bandwidth-entropy:\n  bw_down: 0.9\n", ["bw_down = 0.9 (bw_up = 0.85)"], id="thresholds"
        ),
        pytest.param(
            "bandwidth-entropy:\n  guards: {min_replicas: 500}\n",
            ["must be >= min_replicas (500)"],
            id="guard-bounds",
        ),
    ],
)
def test_rules_between_settings_stop_the_backtest_before_it_simulates(tmp_path, yaml_text, needles):
    # Each setting is in range, the combination is not: found when every policy is built at the
    # edge, named with the file, instead of in a worker once the other policies had run.
    config = write(tmp_path / "policies.yaml", yaml_text)
    p = backtest(
        "--workload", "flash-crowd", "--duration-s", "60", "--policy", "slo,bandwidth-entropy", "--no-oracle",
        "--policy-config", config,
    )  # fmt: skip
    refused(p, "--policy-config", "policies.yaml", "bandwidth-entropy", *needles)


# ---- infeasible requests and a length-aware TTFT SLO -------------------------------------------


def _mixed_trace(tmp_path: Path) -> Path:
    # Every 3 s, 7,000-token prompts (~0.24 s to a first token on an idle H100) between 1,000-token
    # ones (~0.03 s): with a 0.2 s TTFT target, the long ones are infeasible.
    rows = "".join(f"{3 * i},{7000 if i % 2 == 0 else 1000},20\n" for i in range(20))
    return write(tmp_path / "mixed.csv", PLAIN + rows)


@pytest.mark.parametrize(("per_1k", "infeasible"), [("0", 10), ("0.01", 0)])
def test_infeasible_requests_are_said_and_counted_apart(tmp_path, per_1k, infeasible):
    p = backtest(
        "--trace", _mixed_trace(tmp_path), *FAST, "--slo-ttft-s", "0.2",
        "--slo-ttft-per-1k-tokens-s", per_1k, "--json", "-", timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["config"]["slo_ttft_per_1k_tokens_s"] == float(per_1k)
    assert doc["workload"]["infeasible"]["prefill_past_ttft_target"] == infeasible
    assert doc["results"][0]["infeasible"] == infeasible
    assert ("cannot meet the TTFT target even on an idle replica" in p.stderr) == bool(infeasible)


def test_a_negative_length_aware_slo_is_refused():
    p = backtest("--workload", "flash-crowd", "--duration-s", "60", *FAST, "--slo-ttft-per-1k-tokens-s", "-1")
    refused(p, "--slo-ttft-per-1k-tokens-s", "-1")
