"""The judged policy, the measure and the ratios of a fleet (``backtest/fleet_yardsticks.py``) and
the lines the tables print from them (``report/_common.py``), table-driven."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from llmscale.backtest.fleet_yardsticks import fleet_of, judged_policy, price_of_foresight, reference_ratio
from llmscale.backtest.runner import BacktestSettings
from llmscale.report._common import foresight_text, judged_text, measure_of
from llmscale.sim.disagg import DisaggConfig


@pytest.mark.parametrize(
    ("settings", "fleet"),
    [
        pytest.param(BacktestSettings(), "single", id="one-pool"),
        pytest.param(BacktestSettings(gpu="a100-80gb", gpus=("a100-80gb", "h100-80gb")), "mixed", id="gpus"),
        pytest.param(replace(BacktestSettings(), disaggregated=DisaggConfig()), "disaggregated", id="pools"),
    ],
)
def test_fleet_of(settings: BacktestSettings, fleet: str) -> None:
    assert fleet_of(settings) == fleet


@pytest.mark.parametrize(
    ("fleet", "policies", "judged"),
    [
        pytest.param("single", ["static", "slo"], "slo", id="slo"),
        pytest.param("disaggregated", ["slo", "slo-disagg"], "slo-disagg", id="two-pools-own"),
        pytest.param("mixed", ["slo", "gpu-mix"], "gpu-mix", id="mixed-own"),
        pytest.param("mixed", ["static", "slo"], "slo", id="mixed-falls-back-to-slo"),
        pytest.param("disaggregated", ["dynamo-disagg"], None, id="none"),
    ],
)
def test_judged_policy(fleet: str, policies: list[str], judged: str | None) -> None:
    assert judged_policy(fleet, policies) == judged


@pytest.mark.parametrize(
    ("row", "ref", "measure", "ratio"),
    [
        pytest.param({"gpu_hours": 0.1224}, {"gpu_hours": 0.102}, "gpu_hours", 1.2, id="gpu-hours"),
        pytest.param({"cost": 0.2107}, {"cost": 0.2035}, "cost", 1.0354, id="cost"),
        pytest.param({"cost": None}, {"cost": 0.2}, "cost", None, id="no-price"),
        pytest.param({"gpu_hours": 1.0}, {"gpu_hours": 0.0}, "gpu_hours", None, id="zero-reference"),
    ],
)
def test_reference_ratio(row: dict[str, Any], ref: dict[str, Any], measure: str, ratio: float | None) -> None:
    assert reference_ratio(row, ref, measure) == ratio


def _doc(oracle: dict[str, Any], ref: dict[str, Any] | None, *rows: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {"results": list(rows), "oracle": oracle}
    if ref is not None:
        doc["causal_reference"] = ref
        measure = measure_of(doc)[1]
        doc["price_of_foresight"] = price_of_foresight(oracle, ref, measure)
    return doc


MIX = {"policy": "gpu-mix", "slo_attainment": 1.0, "gpu_hours": 0.30, "cost": 0.4}
SLO = {"policy": "slo", "slo_attainment": 0.995, "gpu_hours": 0.12, "cost": 0.36}


@pytest.mark.parametrize(
    ("doc", "judged", "foresight"),
    [
        pytest.param(
            _doc({"gpu_hours": 0.1}, {"slo_attainment": 0.992, "gpu_hours": 0.11}, SLO),
            "slo: 1.09x the causal reference's GPU-hours at 99.50% SLO attainment (the reference's 99.20%)",
            "1.10x the oracle's GPU-hours",
            id="one-pool",
        ),
        pytest.param(
            # A100s are the cheapest by cost, the H100 policy row costs more for fewer GPU-hours.
            _doc(
                {"gpu_hours": 0.25, "cost": 0.3, "mixed_measure": "cost"},
                {"slo_attainment": 1.0, "gpu_hours": 0.26, "cost": 0.32, "mixed_measure": "cost"},
                SLO,
                MIX,
            ),
            "gpu-mix: 1.25x the causal reference's cost at 100.00% SLO attainment (the reference's 100.00%)",
            "1.07x the oracle's cost",
            id="mixed-by-cost",
        ),
        pytest.param(
            _doc(
                {"mode": "disaggregated", "gpu_hours": 0.2},
                {"mode": "disaggregated", "slo_attainment": 1.0, "gpu_hours": 0.2},
                {"policy": "slo-disagg", "slo_attainment": 1.0, "gpu_hours": 0.23},
            ),
            "slo-disagg: 1.15x the causal reference's GPU-hours",
            "1.00x the oracle's GPU-hours",
            id="two-pools",
        ),
        pytest.param(_doc({"gpu_hours": 0.1}, None, SLO), "", "", id="no-reference"),
    ],
)
def test_the_lines_under_the_table(doc: dict[str, Any], judged: str, foresight: str) -> None:
    assert judged_text(doc).startswith(judged) and bool(judged) == bool(judged_text(doc))
    assert foresight in foresight_text(doc)
