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


def _json_key(path: str) -> str:
    """A fit parameter's path as a key of coefficients.json's flattened "model"."""
    head = path.split(".", 1)[0]
    if head in ("a100", "h100"):
        return f"families.{path}"
    if head == "stack":
        return "stacks." + path.split(".", 1)[1]
    return path


def _flat(x: object, prefix: str = "") -> dict[str, float]:
    if isinstance(x, dict):
        out: dict[str, float] = {}
        for k, v in x.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: float(x)} if isinstance(x, int | float) and not isinstance(x, bool) else {}


#: How close a refit must land to the committed coefficients, in units of each parameter's own
#: uncertainty (its Gauss-Newton standard error, written in coefficients.json by the fit). A
#: tenth of what the data can tell apart: another machine's numpy / scipy build moves a
#: well-posed optimum by rounding-level amounts (starts in the optimum's basin agree to 1e-5
#: sigma here), while a different basin sits 19 sigma away. Plus the 6-significant-digit
#: rounding of the committed file (5e-6 relative).
_REFIT_TOL_SIGMA = 0.1
_ROUNDING_REL = 5e-6


def test_refit_reproduces_committed_coefficients(shared_data: Path) -> None:
    """A refit lands on the committed optimum, the same from each start that reaches it,
    and its coefficients give the fidelity the committed file reports (issue 21, item 6).

    See llmscale.offline.perf_fit and docs/performance-model-fit.md for the priors, the bounds
    and the starts.
    """
    pytest.importorskip("scipy")
    from llmscale.offline.perf_fit import PARAMS, error_report, fit_coefficients
    from llmscale.perf.coefficients import coefficients_to_dict

    points = load_points(_calibration_dir(shared_data))
    fitted, info = fit_coefficients(points)
    doc = json.loads(resources.files("llmscale.perf").joinpath("coefficients.json").read_text("utf-8"))
    sigma = {
        path: float(p["sigma"])
        for stage in doc["fit"]["stages"].values()
        for path, p in stage["params"].items()
    }
    assert set(sigma) == {p.path for p in PARAMS}
    new = _flat(coefficients_to_dict(fitted)["model"])
    old = _flat(doc["model"])
    assert new.keys() == old.keys()
    fitted_paths = {_json_key(p.path): p.path for p in PARAMS}
    assert set(fitted_paths) <= set(old), sorted(set(fitted_paths) - set(old))
    off = []
    for key in sorted(old):
        if key in fitted_paths:
            tol = _REFIT_TOL_SIGMA * sigma[fitted_paths[key]] + _ROUNDING_REL * abs(old[key])
        else:  # constants of the model, not fitted: exactly as committed
            tol = 0.0
        if abs(new[key] - old[key]) > tol:
            off.append(f"{key}: refit {new[key]:.6g}, committed {old[key]:.6g}, tolerance {tol:.3g}")
    assert not off, off

    # One optimum: the starts that reach the lowest cost agree on every parameter to a
    # hundredth of its uncertainty, and more than one start reaches it.
    eng = info["stages"]["engines"]
    best = min(eng["starts"].values())
    at_best = [k for k, c in eng["starts"].items() if c <= best * (1 + 1e-6)]
    assert len(at_best) >= 2, eng["starts"]
    assert all(eng["starts_max_distance_sigma"][k] <= 0.01 for k in at_best), eng["starts_max_distance_sigma"]

    # The refit's fidelity is the committed file's (same figures to the reported 0.01 %).
    report = error_report(points, fitted)
    for source, errs in doc["errors"]["by_source"].items():
        for part in ("held_out", "fit"):
            if errs[part].get("n"):
                assert report["by_source"][source][part]["median_ape_pct"] == pytest.approx(
                    errs[part]["median_ape_pct"], abs=0.02
                ), (source, part)


def test_ttft_within_10_percent_on_every_gpu(shared_data: Path) -> None:
    """vLLM's time to first token of 16 x 1,024-token prompts within 10% on A100-40GB, H100 and
    GH200, held-out rows included (issue 21, item 4): prefill physics per GPU (the family's
    sustained FLOP share, the board power's clock), not a factor per row.
    """
    from llmscale.offline.perf_fidelity import e2e_report

    r = e2e_report(load_points(_calibration_dir(shared_data)), load_coefficients())
    ttft = {cfg: v["ttft"] for cfg, v in r["configs"].items() if v["ttft"].get("n")}
    gpus = {cfg.split("/")[1] for cfg in ttft}
    assert {"a100-40gb", "h100-80gb", "gh200"} <= gpus, sorted(ttft)
    assert any(v["held_out"] for v in r["configs"].values() if v["ttft"].get("n"))
    for cfg, t in ttft.items():
        assert t["worst_abs_pct"] <= 10.0, (cfg, t)


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
