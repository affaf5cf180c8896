"""benchmarks/chaos.py: its judge and page rewrites on hand-made inputs, and one fast case end to end.

The judge is what turns decision logs into the table's "wrong" and "lost" columns, so each of its
rules is shown catching the action it names (and passing the one that is fine).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "chaos.py"


def _chaos() -> Any:
    spec = importlib.util.spec_from_file_location("chaos_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chaos_bench"] = module
    spec.loader.exec_module(module)
    return module


chaos = _chaos()


def line(
    t: float,
    *,
    spec: int = 2,
    final: int = 2,
    applied: bool = False,
    unknown: int = 0,
    trace: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    return {
        "time_s": t,
        "trace_id": trace or f"t{t}",
        "replicas": {"spec": spec},
        "desired": final,
        "desired_before_guards": final,
        "applied": applied,
        "unknown_replicas": unknown,
        "metrics_outage": False,
        "actuation_error": None,
        **more,
    }


@pytest.mark.parametrize(
    ("lines", "cooldown_up_s", "wrong"),
    [
        pytest.param([line(0), line(0.5), line(1.0)], 0, 0, id="steady"),
        pytest.param([line(0), line(0.5, final=1, applied=True)], 0, 0, id="scale-down-on-data"),
        pytest.param([line(0), line(0.5, final=1, applied=True, unknown=1)], 0, 1, id="scale-down-unknown"),
        pytest.param([line(0, final=9, spec=2, applied=True)], 0, 1, id="beyond-max"),
        pytest.param(
            [line(0, final=3, applied=True), line(10, final=3, applied=True)], 60, 1, id="in-cooldown"
        ),
        pytest.param(
            [line(0, final=3, applied=True), line(70, final=3, applied=True)], 60, 0, id="after-cooldown"
        ),
        pytest.param([line(0, final=3, applied=True, leader=False)], 0, 1, id="without-the-lease"),
        pytest.param(
            [
                line(0, final=3, applied=True, trace="x"),
                line(0.1, final=3, trace="x", actuation_error={"reason": "conflict"}),
                line(0.5, final=3, applied=True),
            ],
            60,
            0,
            id="a-failed-scale-is-no-action",
        ),
    ],
)
def test_judge_names_each_wrong_action(lines, cooldown_up_s, wrong):
    _, got, _, why = chaos.judge([lines], tick_s=0.5, cooldown_up_s=cooldown_up_s)
    assert got == wrong, why


def test_judge_counts_lost_lines_from_gaps_and_overlapping_terms():
    ticks, _, lost, _ = chaos.judge([[line(0), line(0.5), line(2.0), line(2.5)]], tick_s=0.5)
    assert (ticks, lost) == (4, 2)  # 1.0 and 1.5 are missing
    a = [
        line(0, final=3, applied=True, leader=True, lease_term=1),
        line(5, final=3, applied=True, leader=True, lease_term=1),
    ]
    b = [line(3, final=3, applied=True, leader=True, lease_term=2)]
    _, _, _, why = chaos.judge([a, b], tick_s=0.5)
    assert why == ["two leaders acted in overlapping terms"], why


def test_page_rewrites():
    page = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model="m"} 3\n'
        'vllm:prompt_tokens_total{model="m"} 120\n'
    )
    nan = chaos.rewrite_page(page, "nan")
    assert 'vllm:num_requests_running{model="m"} NaN' in nan and "# TYPE" in nan
    reset = chaos.rewrite_page(page, "reset", baseline=chaos.counter_values(page))
    assert 'vllm:prompt_tokens_total{model="m"} 0.0' in reset
    assert 'vllm:num_requests_running{model="m"} 3' in reset  # gauges untouched
    skew = chaos.rewrite_page(page, "skew", now_s=1000.0)
    assert 'vllm:num_requests_running{model="m"} 3 880000' in skew


def test_issue_19_page_rewrites():
    page = (
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model="m"} 2\n'
        'vllm:prompt_tokens_total{model="m"} 1000\n'
        'vllm:e2e_request_latency_seconds_bucket{model="m",le="1.0"} 3\n'
        'vllm:e2e_request_latency_seconds_bucket{model="m",le="+Inf"} 4\n'
    )
    assert 'vllm:num_requests_waiting{model="m"} 1e9' in chaos.rewrite_page(page, "queue-1e9")
    assert chaos.rewrite_page(page, "duplicate").count('vllm:num_requests_waiting{model="m"} 2') == 2
    falling = chaos.rewrite_page(page, "falling", baseline=chaos.counter_values(page), since_s=10.0)
    assert 'vllm:prompt_tokens_total{model="m"} 800.0' in falling  # 2% a second for 10 s
    buckets = chaos.rewrite_page(page, "buckets")
    assert 'le="1.0"} 1000000.0' in buckets and 'le="+Inf"} 4' in buckets
    assert chaos.rewrite_page(page, "explosion").count("vllm:num_requests_waiting{") == 10_001
    assert 'vllm:num_requests_waiting{model="m"} 2 4600000' in chaos.rewrite_page(
        page, "future", now_s=1000.0
    )


def test_gzip_bomb_inflates_to_its_size():
    import gzip

    assert gzip.decompress(chaos.gzip_bomb(2)) == b"0" * (2 << 20)


def test_judge_dry_counts_decisions_past_the_healthy_ones():
    def ln(t, final, spec=2, unknown=0):
        return {"time_s": t, "desired": final, "replicas": {"spec": spec}, "unknown_replicas": unknown,
                "metrics_outage": False}  # fmt: skip

    healthy = [ln(0, 1), ln(0.5, 2)]
    assert chaos.judge_dry([*healthy, ln(1, 2, unknown=1), ln(1.5, 2)], 2) == []
    why = chaos.judge_dry([*healthy, ln(1, 4, unknown=1), ln(1.5, 1, unknown=1)], 2)
    assert len(why) == 2 and "4 replicas" in why[0] and "scale-down 2->1" in why[1]


def test_format_table_aligns_columns():
    rows = [chaos.Outcome("metrics outage, 1 tick", 2, 0, 0, 9, "x"), chaos.Outcome("nan", 10, 1, 3, 18)]
    table = chaos.format_table(rows).splitlines()
    assert table[0].startswith("| fault ") and len({len(r) for r in table}) == 1


@pytest.mark.slow
def test_one_fast_case_end_to_end(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cases", "outage-1-tick", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = re.search(
        r"^\| metrics outage, 1 tick \| +(\d+) +\| +(\d+) +\| +(\d+) +\| +(\d+) +\|", proc.stdout, re.M
    )
    assert row, proc.stdout
    faults, wrong, lost, ticks = map(int, row.groups())
    assert faults >= 1 and wrong == 0 and lost == 0 and ticks >= 9, proc.stdout
    # the outage did reach the loop: the policy's scale-down was proposed and held
    held = re.search(r"(\d+) proposed scale-down\(s\) held", proc.stdout)
    assert held and int(held.group(1)) >= 1, proc.stdout
