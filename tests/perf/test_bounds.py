"""One data-sheet bound for calibrate, the profile loader and the simulator (issue 21, items 1 and 5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmscale.errors import ConfigError
from llmscale.perf import GPUS, get_perf_model
from llmscale.perf.bounds import check_physical, factor_ceilings
from llmscale.perf.coefficients import load_coefficients
from llmscale.perf.profile import CalibrationProfile, load_profile, scale_coefficients
from llmscale.perf.step_time import PerfModel
from llmscale.sim.gpu_counters import GpuCounterSpec

CLI = [sys.executable, "-m", "llmscale.cli"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env=dict(os.environ, COLUMNS="200"),
    )


@pytest.mark.parametrize(
    ("family", "factor", "ceiling"),
    [
        # H100: gemm 0.688 x serving scale 0.970 = 0.668 of peak -> 1 / 0.668
        pytest.param("h100", "compute", 1.498, id="h100-compute"),
        # A100: gemm 0.717 x serving scale 1.218 = 0.874 of peak
        pytest.param("a100", "compute", 1.144, id="a100-compute"),
        # H100 weight stream at 0.878 of peak HBM bandwidth
        pytest.param("h100", "bandwidth", 1.139, id="h100-bandwidth"),
        # decode attention's KV reads at 0.775 of peak
        pytest.param("h100", "kv", 1.290, id="h100-kv"),
    ],
)
def test_ceilings_of_the_committed_coefficients(family: str, factor: str, ceiling: float) -> None:
    assert factor_ceilings(load_coefficients(), [family])[factor] == pytest.approx(ceiling, abs=1e-3)


def test_the_simulators_counters_accept_every_factor_up_to_its_ceiling() -> None:
    """At the ceiling the step's FLOP rate is the data sheet's, not above it (the crash of issue 21)."""
    base = load_coefficients()
    for gpu in ("h100", "a100-40gb", "gh200"):
        family = get_perf_model("llama-2-7b", gpu, 1).gpu.family
        caps = factor_ceilings(base, [family])
        # kv multiplies the KV read rate on top of bandwidth: its ceiling given bandwidth's
        caps["kv"] = factor_ceilings(base, [family], {"bandwidth": caps["bandwidth"]})["kv"]
        pm = PerfModel("llama-2-7b", gpu, 1, scale_coefficients(base, caps))
        spec = GpuCounterSpec.from_perf(pm)
        assert spec.step_flops_s == pytest.approx(spec.peak_flops_s, rel=1e-9)
        over = scale_coefficients(base, {**caps, "compute": caps["compute"] * 1.01})
        with pytest.raises(ConfigError, match="compute"):
            GpuCounterSpec.from_perf(PerfModel("llama-2-7b", gpu, 1, over))


@pytest.mark.parametrize(
    ("factors", "named"),
    [
        pytest.param({"compute": 1.75}, "compute = 1.75", id="calibrates-old-cap-1.794"),
        pytest.param({"bandwidth": 1.2}, "bandwidth = 1.2", id="bandwidth"),
        pytest.param({"bandwidth": 1.1, "kv": 1.2}, "kv = 1.2", id="kv-on-top-of-bandwidth"),
    ],
)
def test_a_profile_beyond_the_data_sheet_is_refused_at_load(
    tmp_path: Path, factors: dict[str, float], named: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "format: llmscale calibration profile v1\nmodel: llama-2-7b\ngpu: h100-80gb\ntp: 1\nfactors: "
        + "{"
        + ", ".join(f"{k}: {v}" for k, v in factors.items())
        + "}\n"
    )
    with pytest.raises(ConfigError, match=rf"p\.yaml: .*{named}.*data-sheet"):
        load_profile(path)


def test_a_profile_within_its_gpu_but_beyond_another_is_refused_there(tmp_path: Path) -> None:
    """compute 1.4 is an H100 at 0.93 of peak, but an A100 at 1.22: an H100 profile is refused on
    an A100 (a profile of another GPU is refused whatever its factors), and the bound itself says
    why such factors could not run there."""
    path = tmp_path / "h100.yaml"
    CalibrationProfile("llama-2-7b", "h100-80gb", 1, {"compute": 1.4}).save(path)
    assert get_perf_model("llama-2-7b", "h100", 1, calibration=str(path)).kernel.step_flops_s < 989e12
    with pytest.raises(ConfigError, match=r"h100\.yaml: calibration profile fitted on GPU h100-80gb, but"):
        get_perf_model("llama-2-7b", "a100-40gb", 1, calibration=str(path))
    with pytest.raises(ConfigError, match="compute"):
        check_physical(load_coefficients(), {"compute": 1.4}, ["a100"], "x")


def test_backtest_and_emulate_refuse_such_a_profile_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "fast.yaml"
    bad.write_text(
        "format: llmscale calibration profile v1\nmodel: llama-2-7b\ngpu: h100-80gb\ntp: 1\n"
        "factors: {compute: 1.79, host: 0.5}\n"
    )
    for cmd in (
        ["backtest", "--workload", "default", "--duration-s", "30", "--model", "llama-2-7b"],
        ["emulate", "--port", "0", "--max-seconds", "5", "--model", "llama-2-7b"],
    ):
        r = _cli(*cmd, "--calibration", str(bad), cwd=tmp_path)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and "fast.yaml" in r.stderr and "compute" in r.stderr


def test_help_and_errors_list_every_gpu_of_the_catalogue(tmp_path: Path) -> None:
    for cmd in ("backtest", "emulate", "calibrate"):
        out = " ".join(_cli(cmd, "--help", cwd=tmp_path).stdout.split())
        for name in GPUS:
            assert name in out, (cmd, name)
    r = _cli("backtest", "--gpu", "b300", "--duration-s", "10", cwd=tmp_path)
    assert r.returncode == 2
    for name in GPUS:
        assert name in r.stderr
