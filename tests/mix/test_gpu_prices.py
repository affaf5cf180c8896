"""``--gpu-prices prices.yaml``: defaults, limits, and errors naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscale.errors import ConfigError
from llmscale.mix.prices import DEFAULT_PRICES, default_prices, load_gpu_prices


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "prices.yaml"
    p.write_text(text)
    return p


def test_a_file_sets_prices_and_limits_and_keeps_the_other_defaults(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "currency: EUR\ngpus:\n  H100: {price_per_gpu_hour: 2.5, max_gpus: 8}\n  a100-80gb: 1.1\n"
    )
    prices = load_gpu_prices(p)
    assert prices.currency == "EUR"
    assert prices.of("h100-80gb").price_per_gpu_hour == 2.5
    assert prices.of("h100").max_gpus == 8
    assert prices.of("a100-80gb").price_per_gpu_hour == 1.1
    assert prices.of("h200").price_per_gpu_hour == DEFAULT_PRICES["h200"]
    assert prices.of("h200").max_gpus is None
    # 10 H100-hours and 4 A100-hours: 25 + 4.4
    assert prices.cost({"h100-80gb": 10.0, "a100-80gb": 4.0}) == pytest.approx(29.4)


def test_defaults_are_the_cited_list_prices() -> None:
    d = default_prices()
    assert d.of("a100-80gb").price_per_gpu_hour == 1.30
    assert d.of("h100-80gb").price_per_gpu_hour == 3.00
    assert d.of("h200").price_per_gpu_hour == 4.00
    assert d.of("l40s").price_per_gpu_hour == 0.87


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "gpus:\n  h100-80gb: {price_per_gpu_hour: -1}\n",
            r"prices\.yaml: gpus\.h100-80gb\.price_per_gpu_hour = -1: must be a finite number > 0",
            id="negative-price",
        ),
        pytest.param(
            "gpus:\n  h200: {max_gpus: 2.5}\n",
            r"prices\.yaml: gpus\.h200\.max_gpus = 2\.5",
            id="fractional-limit",
        ),
        pytest.param(
            "gpus:\n  h200: {price: 3}\n", r"prices\.yaml: gpus\.h200\.price: unknown field", id="typo"
        ),
        pytest.param(
            "gpus:\n  tpu-v5: 1.0\n",
            r"prices\.yaml: gpus\.tpu-v5: gpu = .tpu-v5. is unknown",
            id="unknown-gpu",
        ),
        pytest.param(
            "gpus:\n  h100: 1.0\n  h100-80gb: 2.0\n",
            r"gpus\.h100-80gb: the same GPU as gpus\.h100",
            id="duplicate",
        ),
        pytest.param("currency: ''\n", r"prices\.yaml: currency = ''", id="empty-currency"),
        pytest.param("gpu:\n  h100: 1\n", r"prices\.yaml: gpu: unknown key", id="misspelt-key"),
    ],
)
def test_errors_name_the_file_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_gpu_prices(_write(tmp_path, text))
