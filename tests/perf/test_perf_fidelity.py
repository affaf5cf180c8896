"""Fidelity of the committed coefficients on the held-out calibration points (reads ../shared/data)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from llmscale.offline.calibration import load_points
from llmscale.perf.coefficients import load_coefficients

pytestmark = pytest.mark.shared_data


def _calibration_dir(shared_data: Path) -> Path:
    d = shared_data / "calibration"
    if not d.is_dir():
        pytest.skip(f"{d} not found: the calibration measurements are not on this machine")
    return d


def test_held_out_median_ape_below_15_percent(shared_data: Path) -> None:
    pytest.importorskip("numpy")
    from llmscale.offline.perf_fit import error_report

    points = load_points(_calibration_dir(shared_data))
    held = [p for p in points if p.held_out]
    assert len(held) > 1000
    report = error_report(points, load_coefficients())
    overall = report["overall"]["held_out"]
    assert overall["median_ape_pct"] < 15.0, report["overall"]
    # Every source's held-out median, step-level sources included, stays moderate.
    for source, errs in report["by_source"].items():
        if errs["held_out"]["n"] >= 3:
            assert errs["held_out"]["median_ape_pct"] < 20.0, (source, errs["held_out"])
    # The committed file reports what the committed coefficients give.
    doc = json.loads(resources.files("llmscale.perf").joinpath("coefficients.json").read_text("utf-8"))
    assert doc["errors"]["overall"]["held_out"]["median_ape_pct"] == pytest.approx(
        overall["median_ape_pct"], abs=0.01
    )


def test_split_is_deterministic_and_holds_out_whole_configurations(shared_data: Path) -> None:
    d = _calibration_dir(shared_data)
    points = load_points(d)
    again = load_points(d)
    assert [(p.source, p.key, p.held_out) for p in points] == [(p.source, p.key, p.held_out) for p in again]
    bloom = [p for p in points if p.model == "bloom-176b"]
    assert bloom and all(p.held_out for p in bloom)
    assert any(not p.held_out for p in points if p.source == "splitwise_prompt")


# A known defect, not a passing test: the engine stage of the staged fit has several basins of
# near-equal cost, and which one a refit reaches depends on the machine's numerical libraries and on
# whether the step-time kernel runs compiled or as Python. On one machine, one start at a time:
# x0.8 ends at cost 0.03848 with 9 coefficients off the committed ones, x1.0 at 0.03674 with 13 off
# (a100 launch_per_layer_s 0.0002 against 0.00016); the committed set came from another machine's
# x0.8. Making the fit well-posed (issue 21, item 6) moves the committed coefficients and with them
# every decision-log digest and fidelity figure, so it is its own change. Not strict: on a machine
# that lands in the committed basin the test passes, and says so.
@pytest.mark.xfail(
    reason="issue 21 item 6: the engine stage's optimum depends on the machine (several basins)",
    strict=False,
)
def test_refit_reproduces_committed_coefficients(shared_data: Path) -> None:
    """A refit lands on the committed optimum (see llmscale.offline.perf_fit and the note above).

    The tolerance covers other numpy / scipy builds (last-digit differences move a
    well-conditioned optimum by far less than 0.2%), not a different basin.
    """
    pytest.importorskip("scipy")
    from llmscale.offline.perf_fit import fit_coefficients
    from llmscale.perf.coefficients import coefficients_to_dict

    points = load_points(_calibration_dir(shared_data))
    fitted, info = fit_coefficients(points)
    new = coefficients_to_dict(fitted)["model"]
    old = coefficients_to_dict(load_coefficients())["model"]

    def flat(x: object, prefix: str = "") -> dict[str, float]:
        if isinstance(x, dict):
            out: dict[str, float] = {}
            for k, v in x.items():
                out.update(flat(v, f"{prefix}.{k}"))
            return out
        return {prefix: x} if isinstance(x, float) else {}

    fn, fo = flat(new), flat(old)
    assert fn.keys() == fo.keys()
    for k in fo:
        assert fn[k] == pytest.approx(fo[k], rel=2e-3, abs=1e-9), k
    # The engine stage (the only one with kinks) reaches the same cost from all three starts.
    costs = list(info["stages"]["engines"]["starts"].values())
    assert max(costs) <= min(costs) * 1.01, costs


def test_end_to_end_latency_of_held_out_configurations(shared_data: Path) -> None:
    """Real vLLM closed batches of whole configurations the fit never saw (issue 10's acceptance).

    Held out: Mistral-7B on A100-40GB and H100 at TP 1/2/4, Qwen2-72B on 4 H100s, Llama-2-7B on
    GH200. See benchmarks/perf_fidelity.py for the full table, including what does not hold yet
    (Mistral-7B on H100 at batch >= 32 and long sequences runs up to 2x slower than any other 7B
    model on that GPU; no term of the model explains it).
    """
    from llmscale.offline.perf_fidelity import e2e_report

    r = e2e_report(load_points(_calibration_dir(shared_data)), load_coefficients())
    held = r["overall"]["held_out"]["makespan"]
    assert held["n"] >= 150
    assert held["median_abs_pct"] <= 10.0, held
    assert held["p90_abs_pct"] <= 20.0, held
    per_token = r["overall"]["held_out"]["per_token_batch1"]
    assert per_token["median_abs_pct"] <= 10.0, per_token
    for cfg, v in r["configs"].items():
        if v["held_out"] and v["makespan"].get("n"):
            assert v["makespan"]["median_abs_pct"] <= 10.0, (cfg, v["makespan"])
    # Where the engine got faster with more GPUs, so does the model (it once got TP backwards).
    checks = r["tp_speedup_checks"]
    assert len(checks) >= 100 and all(c["ok"] for c in checks), [c for c in checks if not c["ok"]][:5]
