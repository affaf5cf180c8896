"""llmscale.yaml validation: a good file loads; each bad field is a ConfigError naming file and path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale.config import Mode, load_config, parse_config
from llmscale.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]

GOOD: dict[str, Any] = {
    "target": {"namespace": "llm", "name": "llama", "selector": {"app": "llama"}},
    "metrics": {"source": "prometheus", "prometheus": {"url": "http://prom:9090"}},
    "policy": {"name": "static", "params": {"replicas": 3}},
    "guards": {"cooldown_up_s": 60, "max_up_step": None, "max_replicas": 10},
    "mode": "apply",
}


def _with(path: str, value: Any) -> dict[str, Any]:
    """GOOD with ``value`` at the dotted ``path`` (a new dict: GOOD is never changed)."""
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    *parents, leaf = path.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return doc


def _write(tmp_path: Path, doc: Any) -> Path:
    p = tmp_path / "llmscale.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_good_file_loads_with_defaults(tmp_path):
    cfg = load_config(_write(tmp_path, GOOD))
    assert cfg.mode is Mode.APPLY and cfg.primary_acts
    assert cfg.tick_s == 15.0
    assert str(cfg.server.listen) == "127.0.0.1:9464"
    assert cfg.guard_overrides() == {"cooldown_up_s": 60.0, "max_up_step": None, "max_replicas": 10}
    assert cfg.metrics.prometheus is not None and cfg.metrics.prometheus.replica_label == "pod"
    assert cfg.target.label == "llm/llama"


def test_mode_override(tmp_path):
    assert load_config(_write(tmp_path, GOOD), mode="dry-run").mode is Mode.DRY_RUN


#: (dotted path, bad value, what the message must contain after "llmscale.yaml: ")
BAD_FIELDS = [
    ("guards.cooldown_up_s", "soon", "guards.cooldown_up_s: Input should be a valid number", "type"),
    ("guards.cooldwn_up_s", 5, "guards.cooldwn_up_s: Extra inputs are not permitted", "typo"),
    ("guards.max_replicas", 0, "guards: max_replicas = 0, must be >= min_replicas", "bounds"),
    ("target.kind", "Pod", "target.kind: Input should be 'Deployment' or 'StatefulSet'", "kind"),
    ("target.backend", "llamacpp", "target.backend:", "backend"),
    ("target.tp", 0, "target.tp: Input should be greater than or equal to 1", "tp"),
    ("target.selector", {}, "target.selector: required", "no-selector"),
    ("target.name", None, "target.name:", "no-name"),
    ("policy.name", "hpa", "policy.name: unknown policy 'hpa'; known policies: ", "policy"),
    ("policy.params", {"replica": 3}, "policy.params: policy 'static' has no parameter", "param"),
    ("tick_s", 0, "tick_s: Input should be greater than 0", "tick"),
    ("mode", "yolo", "mode: Input should be 'apply', 'dry-run' or 'shadow'", "mode"),
    ("mode", "shadow", "shadow: required when mode is shadow", "shadow-missing"),
    ("shadow", {"name": "nope"}, "shadow.name: unknown policy 'nope'", "shadow-policy"),
    ("metrics.prometheus", None, "metrics.prometheus: required", "no-prometheus"),
    ("metrics.prometheus.timeout_s", -1, "metrics.prometheus.timeout_s:", "timeout"),
    ("metrics.source", "statsd", "metrics.source:", "source"),
    (
        "metrics.scrape.static_targets",
        [{"name": "a"}],
        "static_targets.0.url: Field required",
        "static-target",
    ),
    ("actuator.kind", "emulate", "actuator.emulate: required", "emulate-url"),
    ("server.listen", "9464", "server.listen: Value error, '9464' is not host:port", "listen"),
    ("state.store", "file", "state.path: required", "state-path"),
    ("slo.ttft_s", 0, "slo.ttft_s: Input should be greater than 0", "slo"),
    ("extra", 1, "extra: Extra inputs are not permitted", "top-level-typo"),
]


@pytest.mark.parametrize(
    ("path", "value", "message"), [pytest.param(p, v, m, id=i) for p, v, m, i in BAD_FIELDS]
)
def test_bad_field_names_file_and_path(tmp_path, path, value, message):
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, _with(path, value)))
    assert str(err.value).startswith("llmscale.yaml: ")
    assert message in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("target: [unclosed", "llmscale.yaml: not valid YAML", id="yaml"),
        pytest.param("- a list", "expected a mapping of sections", id="not-a-mapping"),
        pytest.param("", "llmscale.yaml: target: Field required", id="empty"),
    ],
)
def test_bad_documents(tmp_path, text, message):
    p = tmp_path / "llmscale.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(p)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "absent.yaml")


@pytest.mark.parametrize("name", ["llmscale.yaml", "llmscale-emulate.yaml"])
def test_examples_load(name):
    cfg = load_config(REPO / "examples" / name)
    assert cfg.policy.name == "slo"
    if name == "llmscale.yaml":
        assert cfg.mode is Mode.DRY_RUN and cfg.actuator.kind == "kubernetes"
        assert cfg.metrics.source == "prometheus"
    else:
        assert cfg.actuator.kind == "emulate" and cfg.shadow is not None
        assert load_config(REPO / "examples" / name, mode="shadow").primary_acts


def test_parse_config_names_its_source():
    with pytest.raises(ConfigError, match=r"^inline: policy: Field required"):
        parse_config({"target": {"name": "x"}}, source="inline")


def test_cli_exits_2_with_the_message_and_no_traceback(tmp_path):
    p = _write(tmp_path, _with("guards.cooldown_up_s", "soon"))
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", "run", "--config", str(p), "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert "llmscale.yaml: guards.cooldown_up_s: Input should be a valid number" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("target_extra", "expected_s"),
    [
        # Llama-3-8B on one H100: the catalogue's published start, 60 s scheduling and image
        # pull + 19.1 s weights + 28.8 s warm-up (see llmscale.perf.cold_start)
        pytest.param({}, 60.0 + 19.1 + 28.8, id="published"),
        pytest.param({"cold_start_s": 3.0}, 3.0, id="measured-on-this-cluster"),
    ],
)
def test_policies_plan_with_the_targets_cold_start(target_extra, expected_s):
    from llmscale.config import policy_context

    doc = _with("target", {**GOOD["target"], "model": "llama-3-8b", "gpu": "h100-80gb", **target_extra})
    ctx = policy_context(parse_config(doc, source="inline"))
    assert ctx.cold_start_s == pytest.approx(expected_s, abs=0.05)
