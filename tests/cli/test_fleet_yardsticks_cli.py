"""``llmscale backtest --disaggregated`` and ``--gpus`` report the workload matrix's yardsticks.

Each command runs for real on three minutes of the Azure conversation trace; a spy on
:mod:`llmscale.backtest.fleet_yardsticks` (calling through) records the workload and settings the
command built, and the matrix's own function for a fleet cell (``benchmarks/matrix_fleets.py``'s
``run_fleet_cell``) is run on those: every row of the command's JSON (the policies', the
oracle's and the causal reference's) equals the matrix's, but for wall time. The JSON follows the
shipped schema, the oracle costs no more than the reference (GPU-hours on two pools, cost on the
mixed fleet), and the line under the table gives the judged policy's ratio to the reference as
the matrix's verdict (``policies.judge``) does.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from llmscale.backtest import fleet_yardsticks
from llmscale.cli import app
from llmscale.schemas import load_schema

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _benchmark(name: str) -> ModuleType:
    """A module of benchmarks/ (``matrix_fleets`` imports ``policies`` by plain name)."""
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _without_wall(value: Any) -> Any:
    """``value`` as JSON reads it back, without its wall times (the only numbers that vary)."""
    if isinstance(value, dict):
        return {k: _without_wall(v) for k, v in value.items() if not k.endswith("wall_s")}
    if isinstance(value, list | tuple):
        return [_without_wall(v) for v in value]
    return value


def _same_rows(mine: list[dict[str, Any]], matrix: list[dict[str, Any]]) -> None:
    got = [_without_wall(r) for r in mine]
    want = [_without_wall(json.loads(json.dumps(r))) for r in matrix]
    assert [r["policy"] for r in got] == [r["policy"] for r in want]
    for a, b in zip(got, want, strict=True):
        assert a == b, a["policy"]


def _spy(monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[Any, Any]]:
    """Record (workload, settings) of each call of ``fleet_yardsticks.<name>``, calling through."""
    calls: list[tuple[Any, Any]] = []
    real = getattr(fleet_yardsticks, name)

    def spy(workload: Any, settings: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append((workload, settings))
        return real(workload, settings, *args, **kwargs)

    monkeypatch.setattr(fleet_yardsticks, name, spy)
    return calls


def _run(args: list[str]) -> str:
    res = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["backtest", *args])
    assert res.exit_code == 0, f"exit {res.exit_code}\n{res.stdout}\n{res.stderr}\n{res.exception!r}"
    return res.stdout


def _check_judged_line(stdout: str, rows: list[dict[str, Any]], judged: str, measure: str) -> None:
    """The table's line for ``judged`` prints the ratio the matrix's verdict prints."""
    judge = _benchmark("policies").judge
    _, why = judge(rows, judged, measure)
    unit = "GPU-hours" if measure == "gpu_hours" else "cost"
    want = re.search(rf"{unit} ([0-9.]+)x reference", why)
    assert want is not None, why
    line = f"{judged}: {want.group(1)}x the causal reference's {unit}"
    assert line in " ".join(stdout.split()), (line, stdout)


def test_disaggregated_json_has_the_two_pool_oracle_and_reference_of_the_matrix(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spy(monkeypatch, "disaggregated_yardsticks")
    out = tmp_path / "pd.json"
    trace = shared_data / "traces" / "azure_llm_2023_conv.csv"
    roster = "slo-disagg,dynamo-disagg,wva-saturation"  # the matrix's two-pool roster
    stdout = _run([
        "--trace", str(trace), "--duration-s", "180", "--rate-scale", "8", "--max-replicas", "8",
        "--disaggregated", "--policy", roster, "--json", str(out),
    ])  # fmt: skip
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema("backtest-disaggregated"), cls=jsonschema.Draft202012Validator)
    oracle, ref = doc["oracle"], doc["causal_reference"]
    # the two-pool oracle (its pair and each pool's schedule) and the reference, per pool
    assert set(oracle["oracle_schedule"]) >= {"prefill", "decode", "interval_s"}
    assert set(ref["reference_search"]) >= {"prefill", "decode", "step_s"}
    for row in (oracle, ref):
        assert set(row["pools"]) == {"prefill", "decode"}
        assert row["gpu_hours"] == pytest.approx(
            row["pools"]["prefill"]["gpu_hours"] + row["pools"]["decode"]["gpu_hours"], abs=1e-4
        )
    assert oracle["gpu_hours"] <= ref["gpu_hours"]
    assert doc["price_of_foresight"] == pytest.approx(ref["gpu_hours"] / oracle["gpu_hours"], abs=1e-4)
    assert doc["price_of_foresight"] >= 1.0

    # The matrix's two-pool cell on the inputs the command built: the same rows.
    (w, settings), *_ = calls
    monkeypatch.undo()  # the matrix's call is not recorded
    cells = _benchmark("matrix_fleets")
    matrix = cells.run_fleet_cell("h100-8b-pd", w, settings, [], 1)
    mine = [*doc["results"], oracle, ref]
    _same_rows(mine, matrix)

    # The table: the reference under the oracle, and slo-disagg's ratio to it as the matrix's verdict.
    assert "causal reference" in stdout and "x ref." in stdout
    _check_judged_line(stdout, mine, "slo-disagg", "gpu_hours")
    # ... and each row's attainment over the feasible requests beside the headline (the oracle and
    # the reference are judged on it)
    assert "feasible" in stdout
    for row in mine:
        feasible = row["slo_attainment_feasible"]
        assert feasible is not None and f"{100 * feasible:.2f}%" in stdout, row["policy"]


def test_mixed_json_has_the_mixed_oracle_and_reference_of_the_matrix_in_cost(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spy(monkeypatch, "mixed_yardsticks")
    out, log = tmp_path / "mix.json", tmp_path / "mix.jsonl"
    trace = shared_data / "traces" / "azure_llm_2023_conv.csv"
    gpus = "a100-80gb,h100-80gb,h200"
    stdout = _run([
        "--trace", str(trace), "--duration-s", "180", "--rate-scale", "3", "--max-replicas", "8",
        "--gpu", "a100-80gb", "--gpus", gpus, "--policy", "gpu-mix,slo", "--jobs", "1",
        "--json", str(out), "--decisions", str(log),
    ])  # fmt: skip
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema("backtest"), cls=jsonschema.Draft202012Validator)
    oracle, ref = doc["oracle"], doc["causal_reference"]
    # each type's oracle and reference; the answers are the cheapest by cost, cost beside GPU-hours
    assert set(oracle["mixed_by_gpu"]) == set(gpus.split(","))
    assert oracle["mixed_measure"] == ref["mixed_measure"] == "cost"
    for row in (oracle, ref):
        assert row["gpu"] in gpus.split(",") and row["cost_currency"] == "USD"
        assert row["cost"] > 0.0 and row["gpu_hours"] > 0.0
    assert oracle["cost"] <= ref["cost"]
    assert doc["price_of_foresight"] == pytest.approx(ref["cost"] / oracle["cost"], abs=1e-4)
    assert doc["price_of_foresight"] == ref["price_of_foresight_cost"]
    # the oracle's decision log is the chosen type's
    assert any(json.loads(line)["policy"] == "oracle" for line in log.read_text().splitlines())

    # The matrix's mixed cell on the inputs the command built: the same rows.
    (w, settings), *_ = calls
    monkeypatch.undo()
    cells = _benchmark("matrix_fleets")
    matrix = cells.run_fleet_cell("a100-8b-mix", w, settings, ["slo"], 1)
    mine = [*doc["results"], oracle, ref]
    _same_rows(mine, matrix)

    # The table: the reference row, the price of foresight and gpu-mix's ratio in cost.
    text = " ".join(stdout.split())
    assert "causal reference" in text and "x the oracle's cost, the price of foresight" in text
    _check_judged_line(stdout, mine, "gpu-mix", "cost")
