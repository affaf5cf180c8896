"""benchmarks/paged_decode_probe.py: its 'committed' columns are the fidelity report's own numbers.

The probe backs a README claim (why per-query-head KV re-reads are not charged): its baseline
must be the same model the fidelity table reports, so the two are compared here, per
configuration, on the shared Argonne rows.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "paged_decode_probe.py"


def test_probe_baseline_is_the_fidelity_report(shared_data: Path) -> None:
    from llmscale.offline.calibration import load_points
    from llmscale.offline.perf_fidelity import e2e_report
    from llmscale.perf.coefficients import load_coefficients

    cal = shared_data / "calibration"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(cal)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    pct = r"([0-9.]+)% /\s+([0-9.]+)%"
    rows = re.findall(rf"^(\S+)\s+(\d)\s+(\d+)\s+{pct}\s+{pct}$", proc.stdout, re.MULTILINE)
    assert len(rows) == 6, proc.stdout  # A100-40GB and H100, TP 1/2/4
    report = e2e_report(load_points(cal), load_coefficients())["configs"]
    for gpu, tp, n, med, p90, _pmed, _pp90 in rows:
        cfg = report[f"mistral-7b/{gpu}/tp{tp}/vllm"]["makespan"]
        assert int(n) == cfg["n"]
        assert abs(float(med) - cfg["median_abs_pct"]) < 0.06, (gpu, tp)
        assert abs(float(p90) - cfg["p90_abs_pct"]) < 0.06, (gpu, tp)
