"""``policy.params`` of llmscale.yaml is checked from the declarations: no policy is built.

Each policy declares its parameters once (``param(...)`` on its config dataclass), its rules
across them with ``register(check=...)`` and the signals it reads with ``register(reads=...)``;
:func:`llmscale.policies.base.validate_params` checks a file's values against them. Here every
policy factory and ``create_policy`` raise if called, and the bad values are still refused with
the field's path; a file for a policy that needs no step-time model is checked without importing
the simulator, the step-time model or numpy.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale.config import parse_config
from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.policies import base
from llmscale.policies.base import POLICIES, create_policy, policy_names
from llmscale.policies.params import PolicyParamError

REPO = Path(__file__).resolve().parents[2]

GOOD: dict[str, Any] = {
    "target": {"namespace": "llm", "name": "llama", "selector": {"app": "llama"}},
    "metrics": {"source": "prometheus", "prometheus": {"url": "http://prom:9090"}},
    "policy": {"name": "static", "params": {"replicas": 3}},
    "mode": "apply",
}


def _doc(policy: str, params: dict[str, Any]) -> dict[str, Any]:
    doc = json.loads(json.dumps(GOOD))
    doc["policy"] = {"name": policy, "params": params}
    return doc


@pytest.fixture
def nothing_is_built(monkeypatch):
    """create_policy and every registered factory raise: a check that builds a policy fails."""

    def built(*args: object, **kwargs: object) -> None:
        raise AssertionError("the configuration check built a policy")

    policy_names()  # registered before they are replaced
    monkeypatch.setattr(base, "create_policy", built)
    for name, info in list(POLICIES.items()):
        monkeypatch.setitem(POLICIES, name, dataclasses.replace(info, factory=built))


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_with_its_defaults_passes_the_check_unbuilt(nothing_is_built, name):
    cfg = parse_config(_doc(name, {}), source="llmscale.yaml")
    assert cfg.policy.name == name


#: (id, policy, params, the path and message after "llmscale.yaml: ")
CASES = [
    ("unknown", "static", {"replica": 3}, "policy.params: policy 'static' has no parameter 'replica'"),
    (
        "string-for-int",
        "static",
        {"replicas": "3"},
        "policy.params.replicas: static.replicas = '3': must be an integer",
    ),
    (
        "string-for-number",
        "slo",
        {"drain_s": "60"},
        "policy.params.drain_s: slo.drain_s = '60': must be a number",
    ),
    (
        "bool-for-number",
        "slo",
        {"drain_s": True},
        "policy.params.drain_s: slo.drain_s = True: must be a number",
    ),
    (
        "fraction-for-int",
        "static",
        {"replicas": 2.5},
        "policy.params.replicas: static.replicas = 2.5: must be an integer",
    ),
    (
        "out-of-range",
        "slo",
        {"target_utilization": 0},
        "policy.params.target_utilization: slo.target_utilization = 0: must be a finite number in [0.01, 1]",
    ),
    (
        "nan",
        "slo",
        {"target_utilization": math.nan},
        "policy.params.target_utilization: slo.target_utilization = nan: must be a finite",
    ),
    ("inf", "slo", {"drain_s": math.inf}, "policy.params.drain_s: slo.drain_s = inf: must be a finite"),
    (
        "minus-inf",
        "slo",
        {"drain_s": -math.inf},
        "policy.params.drain_s: slo.drain_s = -inf: must be a finite",
    ),
    (
        "string-for-bool",
        "composite",
        {"idle_down": "yes"},
        "policy.params.idle_down: composite.idle_down = 'yes': must be a boolean",
    ),
    (
        "signal-typo",
        "breathing",
        {"queue_signal": "queue_wiating"},
        "policy.params.queue_signal: "
        "breathing.queue_signal = 'queue_wiating': not a signal; did you mean 'queue_waiting'?",
    ),
    (
        "choice",
        "dynamo-sla",
        {"load_predictor": "arima"},
        "policy.params.load_predictor: dynamo-sla.load_predictor = 'arima': must be one of constant, kalman",
    ),
    (
        "per-pod-metric",
        "hpa-gpu-util",
        {"metric": "DCGM_FI_DEV_GPU_UTL"},
        "policy.params.metric: hpa-gpu-util.metric = 'DCGM_FI_DEV_GPU_UTL': must be a per-pod metric",
    ),
    # rules across parameters, declared with them (register(check=...))
    (
        "hybrid-warn-over-critical",
        "hybrid",
        {"queue_warn": 60},
        "policy.params.queue_warn: hybrid.queue_warn = 60.0: must be <= queue_critical (50.0)",
    ),
    (
        "hybrid-predictive-p99",
        "hybrid-predictive",
        {"p99_warn_s": 9},
        "policy.params.p99_warn_s: hybrid.p99_warn_s = 9.0: must be <= p99_critical_s (5.0)",
    ),
    (
        "hybrid-gpu-order",
        "hybrid",
        {"gpu_low_pct": 90},
        "policy.params.gpu_high_pct: "
        "hybrid.gpu_high_pct = 85.0: the GPU thresholds must satisfy gpu_low_pct (90.0)",
    ),
    (
        "bandwidth-down-over-up",
        "bandwidth-entropy",
        {"bw_down": 0.9},
        "policy.params.bw_down: "
        "bandwidth-entropy.bw_down = 0.9: down thresholds must be below the up thresholds: "
        "bw_down = 0.9 (bw_up = 0.85)",
    ),
    (
        "entropy-down-equals-up",
        "bandwidth-entropy",
        {"entropy_down": 0.72},
        "policy.params.entropy_down: bandwidth-entropy.entropy_down = 0.72:",
    ),
    (
        "ray-control-slower-than-samples",
        "ray-serve",
        {"control_interval_s": 10.0},
        "policy.params.control_interval_s: "
        "ray-serve.control_interval_s = 10.0: must be <= the sampling interval",
    ),
    (
        "three-layer-down-over-up",
        "three-layer",
        {"queue_per_replica_down": 6},
        "policy.params.queue_per_replica_down: "
        "three-layer.queue_per_replica_down = 6.0: must be in [0, queue_per_replica_up (5.0)]",
    ),
    (
        "dynamo-observe-over-interval",
        "dynamo-sla",
        {"observe_s": 300},
        "policy.params.observe_s: dynamo-sla.observe_s = 300.0: must be <= adjustment_interval_s (180.0)",
    ),
]
BAD = [pytest.param(*case[1:], id=case[0]) for case in CASES]


@pytest.mark.parametrize(("policy", "params", "message"), BAD)
def test_bad_params_are_refused_with_their_path_and_no_policy_built(
    nothing_is_built, policy, params, message
):
    with pytest.raises(ConfigError) as info:
        parse_config(_doc(policy, params), source="llmscale.yaml")
    assert str(info.value).startswith(f"llmscale.yaml: {message}"), str(info.value)


@pytest.mark.parametrize(("policy", "params", "message"), BAD)
def test_building_refuses_them_with_the_same_words(policy, params, message):
    """One check: building the policy refuses the same values with the same message (the rule
    across parameters is not written again in the factory)."""
    with pytest.raises(ConfigError) as built:
        create_policy(policy, Deployment(), params)
    with pytest.raises(ConfigError) as checked:
        parse_config(_doc(policy, params), source="llmscale.yaml")
    assert str(checked.value).endswith(str(built.value))
    if isinstance(built.value, PolicyParamError):
        assert f"policy.params.{built.value.param}: " in str(checked.value)


# Policies that plan with the step-time model have their target checked against the catalogue
# (config._check_step_model), which loads that model on purpose; the others load nothing of it.
_PLAIN = [n for n in policy_names() if not POLICIES[n].needs_step_model]
_HEAVY = ("llmscale.sim", "llmscale.perf", "llmscale.backtest", "numpy")


def test_checking_a_file_imports_no_simulator_step_model_or_numpy(tmp_path):
    script = f"""
import json, sys
from llmscale.config import parse_config
from llmscale.errors import ConfigError
good = {GOOD!r}
for name in {_PLAIN!r}:
    parse_config({{**good, "policy": {{"name": name, "params": {{}}}}}}, source="f")
try:
    parse_config({{**good, "policy": {{"name": "hybrid", "params": {{"queue_warn": 60}}}}}}, source="f")
except ConfigError as e:
    print("refused:", e, file=sys.stderr)
heavy = sorted(m for m in sys.modules if m.split(".")[0] == "numpy" or m.startswith({_HEAVY!r}))
print(json.dumps(heavy))
"""
    env = {"PYTHONPATH": str(REPO / "src"), "LLMSCALE_PURE_PYTHON": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: f: policy.params.queue_warn" in out.stderr
    assert json.loads(out.stdout) == []


def test_yaml_round_trip_of_a_refused_rule(tmp_path, nothing_is_built):
    """The same from a file on disk: the loader names the file and the field."""
    from llmscale.config import load_config

    p = tmp_path / "llmscale.yaml"
    p.write_text(yaml.safe_dump(_doc("hybrid", {"queue_warn": 60})))
    with pytest.raises(ConfigError, match=r"llmscale\.yaml: policy\.params\.queue_warn: "):
        load_config(p)


@pytest.mark.parametrize("window", ["adaptive", "fixed_100ms"])
def test_live_run_refuses_a_token_window_only_the_simulator_can_read(window):
    # Live, these windows read "no data" every tick: the controller would hold the fleet for good.
    with pytest.raises(
        ConfigError, match=rf"policy\.params: token-rate: window '{window}' reads .* use window: tick"
    ):
        parse_config(_doc("token-rate", {"window": window}), source="llmscale.yaml")
    parse_config(_doc("token-rate", {"window": "tick"}), source="llmscale.yaml")
