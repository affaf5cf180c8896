"""Tests of the terminal comparison table and the shared number formatting."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console
from rich.text import Text

from llmscale.errors import ConfigError
from llmscale.report import comparison_table, comparison_view
from llmscale.report._common import COLUMNS, MISSING, fmt_count, fmt_float, fmt_pct, fmt_seconds
from llmscale.report.table import legend_text


def _result(policy: str, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "policy": policy,
        "requests": 120_000,
        "completed": 119_500,
        "rejected": 0,
        "timed_out": 12,
        "killed_by_scale_down": 0,
        "slo_attainment": 0.95,
        "ttft_p50_s": 0.21,
        "ttft_p95_s": 0.8,
        "ttft_p99_s": 1.42,
        "tpot_p50_s": 0.0312,
        "tpot_p99_s": 0.0655,
        "e2e_p50_s": 7.1,
        "e2e_p99_s": 19.4,
        "gpu_hours": 123.456,
        "replicas_mean": 7.64,
        "replicas_max": 14,
        "scale_events": 31,
        "direction_changes": 9,
        "mean_gpu_util": 0.41,
        "makespan_s": 3630.0,
        "wall_s": 2.4,
    }
    base.update(overrides)
    return base


def _doc() -> dict[str, Any]:
    return {
        "workload": {"name": "chat [prod]", "requests": 120_000, "duration_s": 3600.0},
        "config": {"model": "llama-3.1-8b", "gpu": "L4", "tp": 1, "slo_ttft_s": 2.0, "slo_tpot_s": 0.1},
        "results": [
            _result("target-util", slo_attainment=0.912, gpu_hours=150.25),
            _result("[bold]queue-pid[/bold]", slo_attainment=0.99996, gpu_hours=160.0, tpot_p99_s=None),
            _result("predictive", slo_attainment=0.97, gpu_hours=131.5, killed_by_scale_down=1234),
        ],
        "oracle": _result("oracle", slo_attainment=1.0, gpu_hours=101.0),
    }


def _render(doc: dict[str, Any], width: int = 200) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(comparison_table(doc))
    return console.export_text()


def _cells(doc: dict[str, Any], header: str) -> list[Text]:
    table = comparison_table(doc)
    column = next(c for c in table.columns if str(c.header) == header)
    return list(column.cells)  # type: ignore[arg-type]


def test_table_renders_all_policies_oracle_last() -> None:
    text = _render(_doc())
    lines = text.splitlines()
    policy_lines = [line for line in lines if line.startswith("●")]
    assert len(policy_lines) == 4
    assert "target-util" in policy_lines[0]
    # Policy names are printed literally, never parsed as rich markup.
    assert "[bold]queue-pid[/bold]" in policy_lines[1]
    assert "oracle (lower bound)" in policy_lines[-1]
    assert "chat [prod]" in text
    assert "oracle = hindsight lower bound" in text
    for column in COLUMNS:
        for word in column.header.split():
            assert word in text, word


def test_table_formats_numbers() -> None:
    text = _render(_doc())
    row = next(line for line in text.splitlines() if "predictive" in line)
    # attainment %, seconds with 3 significant digits, GPU-hours, mean replicas, thousands separator.
    for value in ("97.0%", "0.210", "1.42", "0.0312", "0.0655", "131.5", "7.6", "14", "31", "1,234", "12"):
        assert value in row.split(), (value, row)
    queue = next(line for line in text.splitlines() if "queue-pid" in line)
    assert MISSING in queue.split()  # tpot_p99_s None
    assert "99.99%" in queue.split(), "99.996 % must not be rounded up to a perfect 100.00%"


def test_table_highlights_best_attainment_and_lowest_gpu_hours() -> None:
    attain = _cells(_doc(), "SLO\nattain.")
    gpu = _cells(_doc(), "GPU\nhours")
    # Best attainment: queue-pid (row 1); lowest GPU-hours: predictive (row 2). The oracle (row 3)
    # beats both but is excluded from the ranking.
    assert [("bold" in str(c.style)) for c in attain] == [False, True, False, False]
    assert [("bold" in str(c.style)) for c in gpu] == [False, False, True, False]
    assert "italic" in str(attain[3].style)


def test_table_ties_and_missing_values() -> None:
    doc = _doc()
    doc["results"][0]["gpu_hours"] = 131.5  # tie with predictive
    doc["results"][2]["slo_attainment"] = None
    del doc["oracle"]
    gpu = _cells(doc, "GPU\nhours")
    assert [("bold" in str(c.style)) for c in gpu] == [True, False, True]
    attain = _cells(doc, "SLO\nattain.")
    assert attain[2].plain == MISSING
    assert "oracle" not in _render(doc)


def test_single_policy_and_empty() -> None:
    doc = {"workload": {"name": "w"}, "config": {}, "results": [_result("only")], "oracle": None}
    assert "only" in _render(doc)
    assert "Policy" in _render({"results": []})


def test_narrow_terminal_never_cuts_numbers() -> None:
    doc = _doc()
    doc["results"][0]["policy"] = "a-policy-with-a-very-long-name-that-must-fold-not-push-numbers-off"
    text = _render(doc, width=120)
    assert all(len(line) <= 120 for line in text.splitlines())
    assert "…" not in text
    assert "1,234" in text and "101.0" in text


def test_bad_documents_raise_config_error() -> None:
    with pytest.raises(ConfigError):
        comparison_table([])  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        comparison_table({"results": {"policy": "x"}})
    with pytest.raises(ConfigError):
        comparison_table({"results": ["x"]})


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, MISSING), (float("nan"), MISSING), (0, "0"), (0.0423, "0.0423"), (1.234, "1.23"), (123.4, "123")],
)
def test_fmt_seconds(value: Any, expected: str) -> None:
    assert fmt_seconds(value) == expected


def test_other_formatters() -> None:
    assert fmt_pct(0.5) == "50.0%"
    assert fmt_pct(1.0) == "100.00%"
    assert fmt_pct(0.99996) == "99.99%"
    assert fmt_pct(None) == MISSING
    assert fmt_count(1234567) == "1,234,567"
    assert fmt_count(None) == MISSING
    assert fmt_float(12345.6, 4) == "12,346"
    assert fmt_float(0.000012345) == "0.000012"
    assert fmt_float("abc") == MISSING


# ---- any terminal width --------------------------------------------------------------------------

DEFAULT_POLICIES = [
    "slo",
    "static",
    "hpa-gpu-util",
    "keda-queue",
    "knative-kpa",
    "aibrix-apa",
    "ray-serve",
    "dynamo-sla",
    "wva-saturation",
]


def _default_run_doc() -> dict[str, Any]:
    """Nine policies and the oracle, with counts as wide as a long run's (12,345.7 GPU-hours)."""
    results = [
        _result(
            name,
            slo_attainment=0.5 + i / 20,
            gpu_hours=1234.5 + 1111 * i,
            rejected=123_456 * (i % 2),
            timed_out=98_765 if name == "hpa-gpu-util" else 3,
            scale_events=1_204,
        )
        for i, name in enumerate(DEFAULT_POLICIES)
    ]
    doc = _doc()
    doc["results"] = results
    return doc


def _millions_doc() -> dict[str, Any]:
    """A week of a large fleet: counts in the millions widen every column past 80 in total."""
    doc = _default_run_doc()
    for i, r in enumerate(doc["results"]):
        r.update(
            gpu_hours=1_234_567.0 + i,
            rejected=12_345_678,
            timed_out=9_876_543,
            killed_by_scale_down=1_234_567,
            scale_events=123_456,
            replicas_max=12_345,
            replicas_mean=9_876.5,
        )
    return doc


def _header_lines(lines: list[str]) -> list[str]:
    """The header lines of every table: the (up to two) lines above each heavy rule."""
    out = []
    for i, line in enumerate(lines):
        if line.startswith("━"):
            out += [lines[j] for j in (i - 2, i - 1) if j >= 0 and "Backtest:" not in lines[j]]
    return out


@pytest.mark.parametrize("width", [80, 100, 160])
@pytest.mark.parametrize(
    "make", [_doc, _default_run_doc, _millions_doc], ids=["three-policies", "default-run", "millions"]
)
def test_view_keeps_every_policy_column_and_number_at_any_width(width, make):
    doc = make()
    console = Console(record=True, width=width, color_system=None)
    console.print(comparison_view(doc))
    text = console.export_text()
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    headers = " ".join(_header_lines(lines)).split()
    labels = [str(r["policy"]) for r in doc["results"]] + ["oracle (lower bound)"]
    for label in labels:
        # The policy column leads every table, names whole (none here is longer than it allows).
        rows = [line for line in lines if line.startswith(f"● {label} ")]
        assert rows, label
    tables = sum(1 for line in lines if line.startswith("━"))
    assert sum(1 for h in _header_lines(lines) if h.startswith("Policy")) == tables
    abbreviated = [c for c in COLUMNS if c.abbrev in headers and c.abbrev not in c.header.split()]
    for column in COLUMNS:
        if column in abbreviated:
            # A documented abbreviation, explained under the tables.
            assert legend_text([column]) in text, column.abbrev
        else:
            assert all(word in headers for word in column.header.split()), column.header
    for result, label in zip([*doc["results"], doc["oracle"]], labels, strict=True):
        row_text = " ".join(line for line in lines if line.startswith(f"● {label} "))
        for column in COLUMNS:
            assert column.fmt(result.get(column.key)) in row_text.split(), (label, column.key)
    if width >= 160 and make is _doc:
        assert tables == 1 and not abbreviated
    if width == 80:
        assert tables >= 2
    if make is _millions_doc and width == 80:
        assert abbreviated, "wide numbers at 80 columns take the abbreviated headers"


def test_view_at_its_narrowest_still_shows_every_column():
    console = Console(record=True, width=40, color_system=None)
    console.print(comparison_view(_default_run_doc()))
    text = console.export_text()
    headers = " ".join(_header_lines(text.splitlines())).split()
    for column in COLUMNS:
        # Each legend entry stays on one line: the abbreviation next to its meaning.
        assert column.abbrev in headers and legend_text([column]) in text, column.abbrev


def test_the_full_table_is_what_a_wide_view_prints():
    wide = Console(record=True, width=200, color_system=None)
    wide.print(comparison_view(_doc()))
    full = Console(record=True, width=200, color_system=None)
    full.print(comparison_table(_doc()))
    assert wide.export_text().split() == full.export_text().split()
