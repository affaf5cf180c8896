"""Fidelity of the committed coefficients on the held-out calibration points (reads ../shared/data)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from llmscale.perf.calibration import load_points
from llmscale.perf.coefficients import load_coefficients

pytestmark = pytest.mark.shared_data


def _calibration_dir(shared_data: Path) -> Path:
    d = shared_data / "calibration"
    if not d.is_dir():
        pytest.skip(f"{d} not found: the calibration measurements are not on this machine")
    return d


def test_held_out_median_ape_below_15_percent(shared_data: Path) -> None:
    pytest.importorskip("numpy")
    from llmscale.perf.fit import error_report

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


@pytest.mark.slow
def test_refit_reproduces_committed_coefficients(shared_data: Path) -> None:
    pytest.importorskip("scipy")
    from llmscale.perf.coefficients import coefficients_to_dict
    from llmscale.perf.fit import fit_coefficients

    points = load_points(_calibration_dir(shared_data))
    # The committed fit keeps the best of three starts; the nominal start reaches the same basin.
    fitted, _ = fit_coefficients(points, starts=(1.0,))
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
