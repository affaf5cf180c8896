"""deploy/prometheus: promtool accepts every rule file, the unit tests pass, and they cover every rule."""

from __future__ import annotations

import re
import subprocess

import yaml
from _deploy import (
    EXTRA_EXPORTER_NAMES,
    YAML_LOADER,
    alert_names,
    load_rules,
    recording_rule_names,
    require,
    rule_files,
    rule_test_files,
    unknown_names,
)


def test_there_are_rule_files_and_tests() -> None:
    assert {p.name for p in rule_files()} >= {
        "llm-signals.rules.yml",
        "llm-alerts.rules.yml",
        "llmscale-controller.rules.yml",
    }
    assert rule_test_files(), "deploy/prometheus/tests/*.yml is empty"


# One promtool process for all files (its output names the file that fails): each start costs
# about a second on a busy two-core machine.
def test_promtool_check_rules() -> None:
    promtool = require("promtool")
    files = [str(p) for p in rule_files()]
    out = subprocess.run([promtool, "check", "rules", *files], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == len(files), out.stdout


def test_promtool_test_rules() -> None:
    promtool = require("promtool")
    files = [str(p) for p in rule_test_files()]
    out = subprocess.run([promtool, "test", "rules", *files], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == len(files), out.stdout


def _unit_tests() -> list[dict]:
    groups = []
    for path in rule_test_files():
        groups.extend(yaml.load(path.read_text(), Loader=YAML_LOADER)["tests"])
    return groups


def test_every_recording_rule_has_an_expected_value() -> None:
    """Each recording rule is the expression (or inside it) of some promql_expr_test with samples."""
    tested: set[str] = set()
    for group in _unit_tests():
        for case in group.get("promql_expr_test", []):
            if case.get("exp_samples"):
                tested.update(re.findall(r"[A-Za-z_][\w]*:[\w:]+", case["expr"]))
    missing = sorted(recording_rule_names() - tested)
    assert not missing, f"recording rules without a promql_expr_test: {missing}"


def test_every_alert_is_tested_firing_and_quiet() -> None:
    """Each alert has a case where it fires and one where it must not (before `for`, or below threshold)."""
    firing: set[str] = set()
    quiet: set[str] = set()
    for group in _unit_tests():
        for case in group.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert not sorted(alert_names() - firing), f"never tested firing: {sorted(alert_names() - firing)}"
    assert not sorted(alert_names() - quiet), f"never tested quiet: {sorted(alert_names() - quiet)}"


def test_rules_read_only_names_that_exist() -> None:
    problems = {}
    for rule in load_rules():
        bad = unknown_names(rule["expr"])
        if bad:
            problems[rule.get("record") or rule["alert"]] = bad
    assert not problems, problems


def test_latency_percentiles_come_from_buckets_not_means() -> None:
    """A mean from _sum/_count hides the tail an SLO is about; percentiles must read _bucket."""
    for rule in load_rules():
        expr = rule["expr"]
        # (the tick histogram's _count is read as a tick counter, not for a mean)
        assert "_sum[" not in expr and "_count[" not in expr.replace("tick_duration_seconds_count", ""), rule
        if "histogram_quantile" in expr:
            assert "_bucket[" in expr and re.search(r"\bby \([^)]*\ble\b", expr), rule


def test_extra_names_are_documented() -> None:
    for name, doc in EXTRA_EXPORTER_NAMES.items():
        assert name in doc.read_text(), f"{name} is not in {doc}"


def test_alerts_carry_routing_labels() -> None:
    """Alertmanager routes on component and severity; every alert needs both, with known values."""
    for rule in load_rules():
        if "alert" in rule:
            labels = rule.get("labels", {})
            assert labels.get("severity") in {"warning", "critical"}, rule["alert"]
            assert labels.get("component") in {"llm-fleet", "llmscale"}, rule["alert"]
            assert rule.get("annotations", {}).get("summary"), rule["alert"]
