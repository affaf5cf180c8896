"""`llmscale tenants` as a user runs it: the CLI in a subprocess, on the example file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "llmscale.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)


def test_example_runs_and_reports_the_quota(tmp_path: Path) -> None:
    decisions = tmp_path / "d.jsonl"
    proc = run(
        "tenants", str(REPO / "examples" / "tenants.yaml"), "--json", "-", "--decisions", str(decisions)
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    chat, code = doc["tenants"]
    assert (chat["tenant"], chat["quota"], chat["max_slices_held"]) == ("chat", 2, 2)
    assert chat["held_ticks"]["quota"] > 0
    assert "gpu_hours" not in chat["result"]  # a slice is not a GPU: tenancy's own hours are above
    assert code["held_ticks"] == {"quota": 0, "pool": 0, "node": 0}
    lines = [json.loads(x) for x in decisions.read_text().splitlines()]
    assert {ln["tenant"] for ln in lines} == {"chat", "code"}
    assert any(ln["admission"] and ln["admission"]["held_by"] == "quota" for ln in lines)


def test_bad_file_exits_2_naming_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "tenants.yaml"
    text = (REPO / "examples" / "tenants.yaml").read_text().replace("quota: 2  ", "quota: -1  ", 1)
    bad.write_text(text)
    proc = run("tenants", str(bad))
    assert proc.returncode == 2
    assert "tenants.chat.quota: Input should be greater than or equal to 0" in proc.stderr
