"""deploy/grafana: the dashboard is valid JSON, laid out without overlaps, and every query reads
only series that exist (recording rules, the controller's contract, exporter names) and parses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _deploy import DEPLOY, grafana_to_promql, promtool_check_exprs, recording_rule_names, unknown_names

DASHBOARD = DEPLOY / "grafana" / "llmscale-dashboard.json"


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panels() -> list[dict]:
    out = []
    for p in _dashboard()["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels of a collapsed row
    return out


def _queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    qs = [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in _panels() for t in p.get("targets", [])]
    for var in _dashboard()["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
            assert m, f"variable {var['name']}: expected label_values(selector, label), got {q!r}"
            qs.append((f"variable {var['name']}", m.group(1)))
    return qs


def test_is_a_dashboard() -> None:
    d = _dashboard()
    assert d["title"] and d["uid"] and isinstance(d["schemaVersion"], int)
    ids = [p["id"] for p in _panels()]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    names = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "namespace", "model", "target"} <= names


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in _dashboard()["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def test_every_panel_queries_something() -> None:
    for p in _panels():
        if p["type"] != "row":
            assert p.get("targets"), p["title"]
            assert all(t["expr"].strip() for t in p["targets"]), p["title"]


def test_queries_read_only_names_that_exist() -> None:
    problems = {where: bad for where, q in _queries() if (bad := unknown_names(grafana_to_promql(q)))}
    assert not problems, problems


def test_queries_parse(tmp_path: Path) -> None:
    promtool_check_exprs([grafana_to_promql(q) for _, q in _queries()], tmp_path)


def test_signals_come_from_recording_rules() -> None:
    """The fleet panels read the recorded series, so they agree with the alerts to the digit."""
    used = set()
    for _, q in _queries():
        used.update(re.findall(r"[A-Za-z_][\w]*:[\w:]+", q))
    rules = recording_rule_names()
    assert not [u for u in used if u.startswith("vllm:") or u.startswith("DCGM")], (
        "raw exporter series in panels"
    )
    fleet_level = {r for r in rules if r.startswith(("namespace_model:", "namespace_model_experiment:"))}
    missing = sorted(fleet_level - used)
    assert not missing, f"service-level recording rules no panel shows: {missing}"


@pytest.mark.parametrize(
    "needle",
    [
        "llmscale_desired_replicas",
        "llmscale_proposed_replicas",
        "llmscale_spec_replicas",
        "llmscale_current_replicas",
        "llmscale_decisions_total",
        "llmscale_guard_actions_total",
        "llmscale_tick_duration_seconds_bucket",
        "llmscale_scrape_errors_total",
        "llmscale_actuation_errors_total",
    ],
)
def test_controller_decisions_are_shown(needle: str) -> None:
    assert any(needle in q for _, q in _queries()), needle


def test_current_replicas_are_split_by_phase() -> None:
    (q,) = [q for _, q in _queries() if "llmscale_current_replicas" in q]
    assert re.search(r"by \(phase\)", q)


@pytest.mark.parametrize(
    "needle",
    [
        "llmscale_model_drift_ratio",
        "llmscale_model_factor",
        'signal="ghost_replicas"',
        'signal="tenant_drift"',
    ],
)
def test_diagnostics_are_shown(needle: str) -> None:
    """Issue 13: the diagnostics that raise alerts are on the dashboard, beside the decisions."""
    assert any(needle in q for _, q in _queries()), needle
