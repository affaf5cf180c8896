"""What `calibrate` fits and refuses: identifiable factors, honest residuals (issue 19 item 7, issue 21)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscale.errors import ConfigError
from llmscale.offline.calibrate import Target, calibrate, read_closed_batches, row_findings
from llmscale.offline.closed_batch import EngineSettings, schedule
from llmscale.perf import get_perf_model
from llmscale.perf.profile import scale_coefficients
from llmscale.perf.step_time import PerfModel


def _synthetic(n: int, latency_s: float = 1.0) -> list[Target]:
    sched = schedule("llama-3-8b", "h100", 1, 256, 256, 4, EngineSettings())
    return [
        Target(f"row {i}", "llama-3-8b", "h100-80gb", 1, latency_s, sched.makespan_s, batch=4, group="g")
        for i in range(n)
    ]


def test_one_row_is_refused_not_fitted_to_zero_error() -> None:
    """Issue 19 item 7: one row would let any factor reproduce it exactly ("0.0% error")."""
    with pytest.raises(ConfigError, match="1 fitted point"):
        calibrate(_synthetic(1), engine=EngineSettings(), engine_name="x", sources=[])


def test_absurd_rows_are_refused() -> None:
    """A batch of 4 x 256 tokens of an 8B model in 1 ms: no engine within the data sheet does that."""
    with pytest.raises(ConfigError, match="not measurements of this model"):
        calibrate(_synthetic(3, latency_s=1e-3), engine=EngineSettings(), engine_name="x", sources=[])


def _rows(
    factors: dict[str, float], lengths: tuple[int, ...], batches: tuple[int, ...], fit: bool
) -> list[Target]:
    """Closed batches of Llama-3-8B on one H100 as an engine with ``factors`` would run them."""
    base = get_perf_model("llama-3-8b", "h100", 1).coeffs
    truth = PerfModel("llama-3-8b", "h100", 1, scale_coefficients(base, factors))
    out = []
    for n in lengths:
        for b in batches:
            sched = schedule("llama-3-8b", "h100", 1, n, n, b, EngineSettings())
            group = f"llama-3-8b/h100-80gb/tp1 in{n} out{n}"
            out.append(
                Target(
                    f"{group} x{b}",
                    "llama-3-8b",
                    "h100-80gb",
                    1,
                    sched.makespan_s(truth),
                    sched.makespan_s,
                    fit,
                    batch=b,
                    group=group,
                )
            )
    return out


def test_without_a_prefill_point_compute_stays_at_its_prior_and_the_fit_says_why() -> None:
    prof = calibrate(
        _rows({"host": 0.5, "per_seq": 0.5}, (128, 1024), (1, 16, 64), True),
        engine=EngineSettings(),
        engine_name="x",
        sources=[],
    )
    assert prof.factors["compute"] == 1.0 and "compute" not in prof.uncertainty
    assert any(n.startswith("compute kept at 1") for n in prof.notes)
    # Two lengths at batches 1/16/64 cannot tell per-sequence host time from the per-step
    # host time and weight stream (graph-captured decode steps): said, not guessed.
    assert prof.factors["per_seq"] == 1.0 and "per_seq" not in prof.uncertainty
    assert any(n.startswith("per_seq kept at its prior: the rows cannot tell it") for n in prof.notes)
    assert max(abs(p.error_pct) for p in prof.points) < 1.0
    # the factors it did fit carry a standard error and the rows that determine them
    assert set(prof.uncertainty) == {"host", "bandwidth", "kv"}
    for u in prof.uncertainty.values():
        assert u["stderr"] >= 0 and len(u["determined_by"]) == 3
    fit_note = next(n for n in prof.notes if n.startswith("fit: "))
    assert "6 points" in fit_note and "degrees of freedom" in fit_note


def test_a_held_out_error_worse_than_the_committed_models_is_a_warning() -> None:
    """Fitted on an engine with half vLLM's host time, held out on rows vLLM itself produced."""
    fitted = _rows({"host": 0.5}, (128, 512), (1, 16, 64), True)
    held = _rows({}, (1024,), (1, 16, 64), False)
    prof = calibrate([*fitted, *held], engine=EngineSettings(), engine_name="x", sources=[])
    assert any(n.startswith("warning: the profile predicts its held-out points worse") for n in prof.notes)


def test_latency_falling_with_batch_size_is_found() -> None:
    rows = _rows({}, (128,), (1, 16, 64), True)
    # one sequence whose "batch" is its prompt batch: faster at 64 than at 1
    flipped = [
        Target(t.label, t.model, t.gpu, t.tp, 4.0 - 0.02 * t.batch, t.predict, batch=t.batch, group=t.group)
        for t in rows
    ]
    (finding,) = row_findings(flipped)
    assert "latency falls with batch size" in finding and "in128 out128" in finding
    with pytest.raises(ConfigError, match="not concurrent closed batches"):
        calibrate(flipped, engine=EngineSettings(), engine_name="x", sources=[])
    serial = [
        Target(t.label, t.model, t.gpu, t.tp, 1.0 * t.batch, t.predict, batch=t.batch, group=t.group)
        for t in rows
    ]
    assert "one after another" in row_findings(serial)[0]
    assert row_findings(rows) == []


def test_a_ttft_column_pins_compute(tmp_path: Path) -> None:
    """An engine with a 1.2x FLOP rate and 0.6x host time, its TTFT measured with each batch."""
    base = get_perf_model("llama-3-8b", "h100", 1).coeffs
    truth = PerfModel("llama-3-8b", "h100", 1, scale_coefficients(base, {"compute": 1.2, "host": 0.6}))
    rows = ["model,gpu,tp,input_tokens,output_tokens,batch_size,latency_s,ttft_s"]
    for n in (256, 1024):
        for b in (1, 8, 32):
            lat = schedule("llama-3-8b", "h100", 1, n, n, b, EngineSettings()).makespan_s(truth)
            ttft = schedule("llama-3-8b", "h100", 1, n, 1, b, EngineSettings()).makespan_s(truth)
            rows.append(f"llama-3-8b,h100,1,{n},{n},{b},{lat},{ttft}")
    f = tmp_path / "ttft.csv"
    f.write_text("\n".join(rows) + "\n")
    targets = read_closed_batches(f, model=None, gpu=None, tp=None, framework=None, engine=EngineSettings())
    prof = calibrate(targets, engine=EngineSettings(), engine_name="x", sources=[str(f)])
    assert prof.factors["compute"] == pytest.approx(1.2, rel=0.03)
    assert any("ttft" in row for row in prof.uncertainty["compute"]["determined_by"])
    assert max(abs(p.error_pct) for p in prof.points) < 1.0


def test_the_live_drift_adjustment_stops_at_the_data_sheet() -> None:
    """FactorScale moves a profile's factors by up to 2x; compute x2 on an H100 would be 1.23x its peak."""
    from llmscale.perf.profile import FactorScale
    from llmscale.sim.gpu_counters import GpuCounterSpec

    pm = get_perf_model("llama-3-8b", "h100", 1, scale=FactorScale(compute=2.0, bandwidth=2.0))
    spec = GpuCounterSpec.from_perf(pm)
    assert spec.step_flops_s == pytest.approx(spec.peak_flops_s, rel=1e-6)
