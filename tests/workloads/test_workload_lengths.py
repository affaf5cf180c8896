"""Length models: closed-form lognormal fits, clipping, and the bootstrap sampler."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from workload_fixtures import AZURE_TEXT, LENGTHS_TEXT

from llmscale.errors import ConfigError, TraceFormatError
from llmscale.workloads import (
    DEFAULT_LENGTHS,
    LengthModel,
    LengthSampler,
    LognormalLengths,
    lognormal_from_mean_p99,
)

Write = Callable[[str, str], Path]


@pytest.mark.parametrize(
    ("mean", "p99", "mu", "sigma"),
    [
        pytest.param(1155.0, 4142.0, 6.8497, 0.6359, id="azure-conv-input"),
        pytest.param(211.0, 601.0, 5.2245, 0.5047, id="azure-conv-output"),
        pytest.param(256.0, 1024.0, 5.2989, 0.7018, id="bandwidth-bound-input"),
        pytest.param(900.0, 2800.0, 6.6490, 0.5538, id="bandwidth-bound-output"),
    ],
)
def test_lognormal_fit_worked_numbers(mean: float, p99: float, mu: float, sigma: float) -> None:
    got_mu, got_sigma = lognormal_from_mean_p99(mean, p99)
    assert got_mu == pytest.approx(mu, abs=1e-4)
    assert got_sigma == pytest.approx(sigma, abs=1e-4)


def test_lognormal_fit_reproduces_mean_and_p99() -> None:
    model = LognormalLengths.from_mean_p99(1155.0, 4142.0, 211.0, 601.0)
    inp, out = model.sample(400_000, np.random.default_rng(0))
    assert inp.mean() == pytest.approx(1155, rel=0.01)
    assert np.percentile(inp, 99) == pytest.approx(4142, rel=0.02)
    assert out.mean() == pytest.approx(211, rel=0.01)
    assert np.percentile(out, 99) == pytest.approx(601, rel=0.02)


@pytest.mark.parametrize(
    ("mean", "p99"),
    [
        pytest.param(100.0, 50.0, id="p99-below-mean"),
        pytest.param(0.0, 5.0, id="zero-mean"),
        pytest.param(1.0, 100.0, id="tail-too-heavy-for-lognormal"),
    ],
)
def test_lognormal_fit_impossible(mean: float, p99: float) -> None:
    with pytest.raises(ConfigError):
        lognormal_from_mean_p99(mean, p99)


def test_from_means_and_clipping() -> None:
    model = LognormalLengths.from_means(914.0, 155.0, sigma=1.0, max_input_tokens=2000, max_output_tokens=300)
    inp, out = model.sample(100_000, np.random.default_rng(1))
    assert inp.max() == 2000
    assert out.max() == 300
    assert inp.min() >= 1
    assert out.min() >= 1
    assert inp.dtype == np.int64


def test_default_lengths_are_design_doc_lognormal() -> None:
    assert (DEFAULT_LENGTHS.input_mu, DEFAULT_LENGTHS.input_sigma) == (6.5, 1.2)
    assert isinstance(DEFAULT_LENGTHS, LengthModel)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"input_sigma": -1.0}, id="negative-sigma"),
        pytest.param({"max_input_tokens": 0}, id="zero-cap"),
        pytest.param({"output_mu": float("nan")}, id="nan-mu"),
    ],
)
def test_lognormal_parameter_errors(kwargs: dict[str, float]) -> None:
    params: dict[str, float] = {"input_mu": 5.0, "input_sigma": 1.0, "output_mu": 4.0, "output_sigma": 1.0}
    params.update(kwargs)
    with pytest.raises(ConfigError):
        LognormalLengths(**params)  # type: ignore[arg-type]


def test_sampler_from_length_file_draws_real_pairs(write: Write) -> None:
    sampler = LengthSampler.from_file(write("lengths.csv", LENGTHS_TEXT))
    assert sampler.clamped == 1  # the 0 decode tokens row
    inp, out = sampler.sample(1000, np.random.default_rng(3))
    pairs = set(zip(inp.tolist(), out.tolist(), strict=True))
    assert pairs <= {(74, 918), (290, 905), (1402, 1), (2497, 918)}
    assert len(pairs) == 4
    assert sampler.describe()["pairs"] == 4


def test_sampler_is_seeded(write: Write) -> None:
    sampler = LengthSampler.from_file(write("lengths.csv", LENGTHS_TEXT))
    a = sampler.sample(50, 7)
    b = sampler.sample(50, np.random.default_rng(7))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_sampler_from_a_trace(write: Write) -> None:
    sampler = LengthSampler.from_file(write("az.csv", AZURE_TEXT))
    assert sampler.input_tokens.tolist() == [374, 396, 879, 91, 1200]


def test_sampler_from_bad_file(write: Write) -> None:
    with pytest.raises(TraceFormatError, match="not a length file"):
        LengthSampler.from_file(write("junk.csv", "a,b\n1,2\n"))


def test_sampler_length_file_error_names_line(write: Write) -> None:
    path = write("lengths.csv", LENGTHS_TEXT + "12,x,1,1\n")
    with pytest.raises(TraceFormatError) as info:
        LengthSampler.from_file(path)
    assert (info.value.line, info.value.field) == (6, "num_decode_tokens")


@pytest.mark.parametrize(
    ("inp", "out"),
    [
        pytest.param([], [], id="empty"),
        pytest.param([1, 2], [1], id="mismatched"),
        pytest.param([-1], [1], id="negative"),
    ],
)
def test_sampler_bad_arrays(inp: list[int], out: list[int]) -> None:
    with pytest.raises(ConfigError):
        LengthSampler(np.array(inp, dtype=np.int64), np.array(out, dtype=np.int64))
