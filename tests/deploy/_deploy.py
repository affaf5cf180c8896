"""Helpers for the deploy/ tests: paths, the binaries they need, and which metric names exist.

"Exists" means one of: a recording rule of deploy/prometheus, a name of the controller's own
/metrics contract (docs/notes/live-controller-contracts.md), or an exporter name from
``llmscale.metrics.names``. PromQL in rules, dashboards and ScaledObjects may use nothing else,
so a typo or a renamed metric fails here rather than as an empty panel in production.
"""

from __future__ import annotations

import re
import shutil
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROM_DIR = DEPLOY / "prometheus"
CONTRACT_DOC = REPO / "docs" / "notes" / "live-controller-contracts.md"
EXPORTER_DOC = REPO / "docs" / "notes" / "exporters-and-peer-autoscalers.md"

#: Series the rules read that names.py does not list, each with where it is documented.
#: test_extra_names_are_documented checks the claim. (vLLM's finished-request counter was one
#: until names.py listed it as ``VllmMetric.REQUEST_SUCCESS``: an exporter's name belongs there.)
EXTRA_EXPORTER_NAMES: dict[str, Path] = {}
#: Prometheus' own per-target series.
PROMETHEUS_BUILTINS = frozenset({"up"})

#: libyaml's loader when PyYAML has it: the rule tests are a few thousand lines
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def require(binary: str) -> str:
    """The path of ``binary``, or skip the test saying which Debian package provides it."""
    path = shutil.which(binary)
    if path is None:
        package = {
            "promtool": "prometheus",
            "amtool": "prometheus-alertmanager",
            "prometheus-alertmanager": "prometheus-alertmanager",
        }.get(binary, binary)
        pytest.skip(f"{binary} not on PATH (Debian package {package})")
    return path


def rule_files() -> list[Path]:
    return sorted(PROM_DIR.glob("*.rules.yml"))


def rule_test_files() -> list[Path]:
    return sorted((PROM_DIR / "tests").glob("*.yml"))


def load_rules() -> list[dict]:
    rules: list[dict] = []
    for path in rule_files():
        for group in yaml.load(path.read_text(), Loader=YAML_LOADER)["groups"]:
            rules.extend(group["rules"])
    return rules


@cache
def recording_rule_names() -> frozenset[str]:
    return frozenset(r["record"] for r in load_rules() if "record" in r)


@cache
def alert_names() -> frozenset[str]:
    return frozenset(r["alert"] for r in load_rules() if "alert" in r)


@cache
def controller_metric_names() -> frozenset[str]:
    """Names from the contract's table of the controller's /metrics, histograms with their series."""
    names: set[str] = set()
    for m in re.finditer(r"^\| `(llmscale_[a-z_]+)` \| (\w+) \|", CONTRACT_DOC.read_text(), re.MULTILINE):
        name, kind = m.groups()
        names.add(name)
        if kind == "histogram":
            names.update(name + s for s in HISTOGRAM_SUFFIXES)
    return frozenset(names)


@cache
def exporter_metric_names() -> frozenset[str]:
    from llmscale.metrics import names as n

    plain: set[str] = set()
    histograms: set[str] = set()
    for backend in (n.VLLM, n.VLLM_OLD, n.TGI, n.TRITON):
        for field in ("running", "waiting", "kv_usage", "preemptions", "prompt_tokens", "generation_tokens"):
            if (v := getattr(backend, field)) is not None:
                plain.add(v)
        for field in ("ttft", "e2e", "itl", "tpot", "queue_time"):
            if (v := getattr(backend, field)) is not None:
                histograms.add(v)
    plain.update(v for k, v in vars(n.DCGM).items() if k.isupper())
    vllm_all = {v for k, v in vars(n.VllmMetric).items() if k.isupper()}
    histograms.update(vllm_all & n.VLLM_HISTOGRAMS)
    plain.update(vllm_all - histograms)
    for h in histograms:
        plain.update(h + s for s in HISTOGRAM_SUFFIXES)
    return frozenset(plain)


def known_names() -> frozenset[str]:
    return (
        recording_rule_names()
        | controller_metric_names()
        | exporter_metric_names()
        | frozenset(EXTRA_EXPORTER_NAMES)
        | PROMETHEUS_BUILTINS
    )


# ---- PromQL: which metric names does an expression select? --------------------------------

_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
        "atan2",
    }
)
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_NAME_REGEX = re.compile(r'__name__\s*=~\s*"([^"]*)"')


def grafana_to_promql(expr: str) -> str:
    """Replace Grafana's variables by values PromQL accepts (a duration, or a plain word)."""
    expr = re.sub(r"\$__(rate_)?interval|\$\{__(rate_)?interval\}", "5m", expr)
    return re.sub(r"\$\{?\w+\}?", "x", expr)


def selected_names(expr: str) -> tuple[set[str], list[str]]:
    """(metric names an expression selects, ``__name__=~`` regexes it uses).

    Strings, label matchers, ranges and label lists are removed first; what remains that is an
    identifier, not a function call and not a keyword, is a metric name.
    """
    regexes = _NAME_REGEX.findall(expr)
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^{}]*\}", " ", s)
    s = re.sub(r"\[[^\[\]]*\]", " ", s)
    s = _LABEL_LIST.sub(" ", s)
    names = set()
    for m in re.finditer(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()", s):
        word = m.group(1)
        if word.lower() not in _KEYWORDS:
            names.add(word)
    return names, regexes


def unknown_names(expr: str) -> list[str]:
    """Names (or ``__name__`` regexes) in ``expr`` that no rule, contract or exporter defines."""
    names, regexes = selected_names(expr)
    known = known_names()
    bad = sorted(names - known)
    bad += [f"__name__=~{r!r} matches nothing" for r in regexes if not any(re.fullmatch(r, k) for k in known)]
    return bad


def promtool_check_exprs(exprs: list[str], tmp_path: Path) -> None:
    """Fail unless promtool parses every expression (as recording rules of a scratch file)."""
    import subprocess

    promtool = require("promtool")
    doc = {
        "groups": [
            {"name": "check", "rules": [{"record": f"check_{i}", "expr": e} for i, e in enumerate(exprs)]}
        ]
    }
    path = tmp_path / "exprs.rules.yml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
