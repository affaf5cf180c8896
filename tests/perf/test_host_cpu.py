"""The host CPU of a machine prices the host side of every engine iteration (docs/performance-model-fit.md,
"Host CPU"): a GH200's Grace CPU against the x86 hosts of every other GPU."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from llmscale.errors import ConfigError
from llmscale.perf import PerfModel
from llmscale.perf.catalogue import GPUS, HOST_CPUS, get_gpu
from llmscale.perf.coefficients import coefficients_from_dict, coefficients_to_dict, load_coefficients


def _without_host_factor():
    return replace(load_coefficients(), host_time_scale=MappingProxyType({}))


def test_every_gpu_names_a_known_host_and_only_gh200_is_grace() -> None:
    assert {g.host_cpu for g in GPUS.values()} <= set(HOST_CPUS)
    assert [g.name for g in GPUS.values() if g.host_cpu == "grace"] == ["gh200"]
    # a MIG slice keeps its board's host
    assert get_gpu("h100-80gb:3g.40gb").host_cpu == "x86"


def test_unknown_host_cpu_is_a_config_error_naming_the_gpu() -> None:
    with pytest.raises(ConfigError, match=r"gpu 'h100-80gb': host_cpu = 'power9'"):
        replace(get_gpu("h100"), host_cpu="power9")


def test_fitted_grace_factor_is_committed_and_x86_is_the_unit() -> None:
    c = load_coefficients()
    assert c.host_scale("x86") == 1.0
    assert c.host_scale("grace") > 1.0  # fitted: the Grace host takes longer for the same Python
    with pytest.raises(ConfigError, match=r"host_time_scale.grace = 0.0, must be > 0"):
        doc = coefficients_to_dict(c)
        doc["model"]["host_time_scale"] = {"grace": 0.0}
        coefficients_from_dict(doc)


@pytest.mark.parametrize("gpu", ["a100-40gb", "h100-80gb", "h200", "l40s"])
def test_x86_machines_are_bit_for_bit_the_model_without_a_host_factor(gpu: str) -> None:
    with_f = PerfModel("llama-3-8b", gpu, 1)
    without = PerfModel("llama-3-8b", gpu, 1, _without_host_factor())
    for args in ((0, 0.0, 0, 1, 500), (0, 0.0, 0, 64, 64_000), (2048, 2048 * 1024.5, 1, 8, 8000)):
        assert with_f.step(*args) == without.step(*args)


def test_grace_scales_the_host_terms_and_not_the_sampler_kernels() -> None:
    """A batch-B decode step on a GH200 is longer by (k - 1) x (fixed + B x per-sequence host
    time); the sampler's pass over the vocabulary (GPU kernels) and the GPU work are unchanged."""
    c = load_coefficients()
    k = c.host_scale("grace")
    st = c.stack(None)
    grace = PerfModel("qwen2-7b", "gh200", 1)
    x86 = PerfModel("qwen2-7b", "gh200", 1, _without_host_factor())
    host_fixed = c.cpu_iter_s + st.iter_s
    host_per_seq = c.cpu_per_seq_s + st.per_seq_s
    for b in (1, 16, 64):
        d = grace.decode(b, 1000).duration_s - x86.decode(b, 1000).duration_s
        assert d == pytest.approx((k - 1.0) * (host_fixed + b * host_per_seq), rel=1e-9)
        assert grace.decode(b, 1000).sm_busy_s == x86.decode(b, 1000).sm_busy_s
    # A prefill iteration adds the engine's prefill set-up, also host work. It is eager, so its
    # launches (28 layers x 0.34 ms x k = 11 ms for 20 ms of GPU work) enter the near-max blend,
    # which adds ~(l/g)^20 / 20 ~ 1e-9 s: within 10 ns.
    d = grace.prefill(1024).duration_s - x86.prefill(1024).duration_s
    assert d == pytest.approx((k - 1.0) * (host_fixed + host_per_seq + st.prefill_iter_s), abs=1e-8)


@pytest.mark.shared_data
def test_grace_factor_fitted_on_qwen2_improves_the_held_out_llama2_gh200(shared_data: Path) -> None:
    """The blind test of the host hypothesis: the factor is fitted on Qwen2-7B's GH200 rows only;
    Llama-2-7B on GH200 is a held-out configuration, and its end-to-end error must fall with the
    factor, at batch 1 and at batch 64 alike (host time is paid per step and per sequence)."""
    pytest.importorskip("numpy")
    from llmscale.offline.calibration import load_points
    from llmscale.offline.perf_fit import predict

    d = shared_data / "calibration"
    if not d.is_dir():
        pytest.skip(f"{d} not found: the calibration measurements are not on this machine")
    pts = [
        p for p in load_points(d) if p.source == "argonne_e2e" and p.config.startswith("llama-2-7b/gh200/")
    ]
    assert len(pts) == 20 and all(p.held_out for p in pts)

    def median_abs_pct(coeffs, batch: int) -> float:
        rows = [(p, y) for p, y in zip(pts, predict(pts, coeffs), strict=True) if p.key[2] == batch]
        return statistics.median(abs(y / p.measured_s - 1.0) * 100.0 for p, y in rows)

    for batch in (1, 64):
        assert median_abs_pct(load_coefficients(), batch) < median_abs_pct(_without_host_factor(), batch)
