"""Presets: every one builds, is deterministic, matches its description and needs no files."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from llmscale.errors import ConfigError
from llmscale.workloads import PRESETS, Workload, make_preset

REQUIRED = ["default", "azure-like", "flash-crowd", "diurnal", "bandwidth-bound", "on-off"]
PRESET_IDS = [pytest.param(name, id=name) for name in REQUIRED]


def test_required_presets_exist() -> None:
    assert set(REQUIRED) <= set(PRESETS)


@pytest.mark.parametrize("name", PRESET_IDS)
def test_preset_builds_and_is_deterministic(name: str) -> None:
    a = make_preset(name, seed=1, duration_s=600)
    b = make_preset(f"preset:{name}", seed=1, duration_s=600)
    c = make_preset(name, seed=2, duration_s=600)
    assert a.name == f"preset:{name}"
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)
    assert not np.array_equal(a.arrival_s[:50], c.arrival_s[:50])
    assert a.meta["format"] == "preset"
    assert a.meta["preset"] == name
    assert a.meta["seed"] == 1
    json.dumps(a.meta)


@pytest.mark.parametrize("name", PRESET_IDS)
def test_description_is_one_line(name: str) -> None:
    description = PRESETS[name].description
    assert description
    assert "\n" not in description
    assert len(description) < 110


@pytest.mark.parametrize("name", PRESET_IDS)
def test_rate_rps_mean_scales_the_count(name: str) -> None:
    base = make_preset(name, seed=0, duration_s=600)
    half = make_preset(
        name, seed=0, duration_s=600, rate_rps_mean=PRESETS[name].parameters()["rate_rps_mean"] / 2
    )
    assert half.num_requests == pytest.approx(base.num_requests / 2, rel=0.05)


@pytest.fixture(scope="module")
def default_hour() -> Workload:
    return make_preset("default", seed=0)


def test_default_matches_azure_shape(default_hour: Workload) -> None:
    w = default_hour
    summary = w.summary()
    assert w.duration_s == pytest.approx(3600, abs=5)
    # Ramp mean 60 req/s plus the flash crowd's 2 * 71.9 * 120 s / 3600 s = 4.8 req/s.
    assert summary["mean_rps"] == pytest.approx(64.8, rel=0.02)
    assert summary["input_mean_tokens"] == pytest.approx(1155, rel=0.02)
    assert summary["input_p99_tokens"] == pytest.approx(4142, rel=0.04)
    assert summary["output_mean_tokens"] == pytest.approx(211, rel=0.02)
    assert summary["output_p99_tokens"] == pytest.approx(601, rel=0.04)


def test_default_has_ramp_and_flash_crowd(default_hour: Workload) -> None:
    t = default_hour.arrival_s + float(default_hour.meta["t0_offset_s"])  # type: ignore[arg-type]
    per_min = np.bincount((t // 60).astype(int), minlength=60)[:60] / 60.0
    # Ramp: ~28.8 req/s at the start, ~72 at the peak (minute ~37), ~54 at the end.
    assert per_min[0] == pytest.approx(0.4 * 72.1, rel=0.1)
    assert per_min[35] == pytest.approx(72.1, rel=0.05)
    assert per_min[59] == pytest.approx(0.753 * 72.1, rel=0.08)
    # Flash crowd x3 over minutes 39-41.
    assert per_min[39] == pytest.approx(3 * 71.9, rel=0.05)
    assert per_min[40] == pytest.approx(3 * 71.9, rel=0.05)
    assert per_min[42] == pytest.approx(71.5, rel=0.05)


def test_default_inter_arrival_cv_is_azure_like() -> None:
    w = make_preset("azure-like", seed=0, duration_s=1200)
    gaps = np.diff(w.arrival_s)
    # 1.1 in operational time; the slow ramp adds a little on top.
    assert gaps.std() / gaps.mean() == pytest.approx(1.12, abs=0.05)


def test_azure_like_has_no_spike() -> None:
    w = make_preset("azure-like", seed=0)
    assert w.mean_rate_rps == pytest.approx(60, rel=0.02)
    assert w.peak_rate_rps() < 80


def test_bandwidth_bound_is_decode_heavy() -> None:
    w = make_preset("bandwidth-bound", seed=0, duration_s=1200)
    assert w.output_tokens.mean() == pytest.approx(900, rel=0.03)
    assert w.input_tokens.mean() == pytest.approx(256, rel=0.03)
    assert w.mean_rate_rps == pytest.approx(15, rel=0.05)


def test_on_off_alternates() -> None:
    w = make_preset("on-off", seed=0, duration_s=1200)
    t = w.arrival_s + float(w.meta["t0_offset_s"])  # type: ignore[arg-type]
    assert np.all((t % 600) < 300 + 1e-9)
    assert np.count_nonzero(t < 300) / 300 == pytest.approx(120, rel=0.05)


def test_diurnal_swings_four_times() -> None:
    w = make_preset("diurnal", seed=0)
    per_5min = np.bincount((w.arrival_s // 300).astype(int))[:24] / 300
    assert per_5min.max() / per_5min.min() == pytest.approx(4 * 0.97, rel=0.15)


def test_flash_crowd_preset() -> None:
    w = make_preset("flash-crowd", seed=0)
    t = w.arrival_s + float(w.meta["t0_offset_s"])  # type: ignore[arg-type]
    assert np.count_nonzero((t >= 600) & (t < 720)) / 120 == pytest.approx(240, rel=0.05)


def test_parameters_listed_with_defaults() -> None:
    params = PRESETS["default"].parameters()
    assert params["rate_rps_mean"] == 60.0
    assert params["duration_s"] == 3600.0


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        pytest.param("nope", {}, "unknown preset 'nope'; available: default", id="unknown-preset"),
        pytest.param("default", {"rps": 5.0}, "has no parameter rps", id="unknown-parameter"),
        pytest.param("default", {"rate_rps_mean": -1.0}, "rate_rps_mean = -1.0", id="negative-rate"),
        pytest.param("default", {"rate_rps_mean": "fast"}, "must be a number", id="non-numeric"),
        pytest.param("diurnal", {"trough_ratio": 2.0}, "trough_ratio", id="bad-trough"),
    ],
)
def test_preset_errors(name: str, params: dict[str, float], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        make_preset(name, seed=0, **params)


def test_import_and_presets_read_no_files() -> None:
    """Importing the package and building every preset opens no data file.

    Checked with an audit hook in a clean interpreter, which sees every open().
    """
    script = textwrap.dedent(
        """
        import sys
        opened = []
        def hook(event, args):
            if event == "open" and isinstance(args[0], str) and not args[0].endswith((".py", ".pyc", ".so")):
                opened.append(args[0])
        import numpy  # noqa: F401  (its own imports are not ours)
        sys.addaudithook(hook)
        from llmscale.workloads import PRESETS, make_preset
        for name in PRESETS:
            make_preset(name, seed=0, duration_s=60)
        data = [p for p in opened if "shared" in p or p.endswith((".csv", ".jsonl", ".json"))]
        print(repr(data))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout
