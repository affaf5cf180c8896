"""llmscale.yaml validation: a good file loads; each bad field is a ConfigError naming file and path."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from llmscale.config import LiveConfig, PolicySpec, load_config, parse_config
from llmscale.errors import ConfigError
from llmscale.types import Mode

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
    assert cfg.tick_s is None  # the policy's own cadence
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
    ("tick_s", 0, "tick_s: Input should be greater than or equal to 0.1", "tick"),
    ("tick_s", float("inf"), "tick_s: Input should be a finite number (got inf)", "tick-inf"),
    ("tick_s", float("nan"), "tick_s: Input should be a finite number", "tick-nan"),
    (
        "guards.max_up_step",
        -1,
        "guards.max_up_step: Input should be greater than or equal to 1 (got -1)",
        "up-step",
    ),
    (
        "guards.max_down_step",
        -2,
        # 0 holds the fleet, in a backtest and live alike (guards.GUARD_RANGES)
        "guards.max_down_step: Input should be greater than or equal to 0",
        "down-step",
    ),
    (
        "guards.max_up_ratio",
        0.5,
        "guards.max_up_ratio: Input should be greater than or equal to 1",
        "up-ratio",
    ),
    (
        "guards.cooldown_down_s",
        -5,
        "guards.cooldown_down_s: Input should be greater than or equal to 0",
        "cooldown",
    ),
    (
        "guards.stabilization_up_s",
        float("inf"),
        "guards.stabilization_up_s: Input should be a finite",
        "stab-inf",
    ),
    (
        "guards.headroom_max_usage",
        1.5,
        "guards.headroom_max_usage: Input should be less than or equal to 1",
        "headroom",
    ),
    (
        "guards.confirm_up_ticks",
        0,
        "guards.confirm_up_ticks: Input should be greater than or equal to 1",
        "confirm",
    ),
    ("guards.gpu_budget", -8, "guards.gpu_budget: Input should be greater than or equal to 1", "gpu-budget"),
    ("guards.min_replicas", 1.5, "guards.min_replicas: Input should be a valid integer", "min-fraction"),
    (
        "shadow",
        {"name": "static", "params": {"replicas": 2}, "guards": {"max_up_step": -1}},
        "shadow.guards.max_up_step: Input should be greater than or equal to 1",
        "shadow-step",
    ),
    (
        "policy.params",
        {"replicas": "three"},
        "policy.params.replicas: static.replicas = 'three': must be an integer",
        "param-string",
    ),
    (
        "policy",
        {"name": "slo", "params": {"drain_s": "fast"}},
        "policy.params.drain_s: slo.drain_s = 'fast': must be a number",
        "numeric-param-string",
    ),
    (
        "policy",
        {"name": "slo", "params": {"target_utilization": float("nan")}},
        "policy.params.target_utilization: slo.target_utilization = nan: must be a finite number",
        "numeric-param-nan",
    ),
    (
        "policy",
        {"name": "composite", "params": {"idle_down": "yes"}},
        "policy.params.idle_down: composite.idle_down = 'yes': must be a boolean",
        "flag-param-string",
    ),
    (
        "policy",
        {"name": "breathing", "params": {"queue_signal": "queue_wiating"}},
        "policy.params.queue_signal: breathing.queue_signal = 'queue_wiating': not a signal; "
        "did you mean 'queue_waiting'?",
        "signal-typo",
    ),
    (
        "policy",
        {"name": "keda-queue", "params": {"signal": "kv_usage"}},
        "policy.params.signal: keda-queue.signal = 'kv_usage': not a signal",
        "keda-signal-typo",
    ),
    (
        "shadow",
        {"name": "hpa-gpu-util", "params": {"metric": "DCGM_FI_DEV_GPU_UTL"}},
        "shadow.params.metric: hpa-gpu-util.metric = 'DCGM_FI_DEV_GPU_UTL': must be a per-pod",
        "hpa-metric-typo",
    ),
    (
        "metrics.prometheus.url",
        "prom:9090",
        "metrics.prometheus.url: 'prom:9090' must start with http://",
        "prom-url",
    ),
    ("metrics.prometheus.url", "http://", "metrics.prometheus.url: 'http://' has no host", "url-no-host"),
    (
        "metrics.prometheus.url",
        "http://prom:99999",
        "metrics.prometheus.url: 'http://prom:99999' is not a URL",
        "url-port",
    ),
    (
        "metrics.prometheus.url",
        "http://prom:90 90",
        "metrics.prometheus.url: 'http://prom:90 90' contains blanks",
        "url-blank",
    ),
    (
        "metrics.prometheus.max_sample_age_s",
        float("inf"),
        "metrics.prometheus.max_sample_age_s: Input should be a finite",
        "age",
    ),
    ("metrics.scrape.path", "metrics", "metrics.scrape.path: String should match pattern", "scrape-path"),
    (
        "metrics.scrape.max_sample_age_s",
        0,
        "metrics.scrape.max_sample_age_s: Input should be greater than 0",
        "scrape-age",
    ),
    (
        "actuator.keda.max_streams",
        0,
        "actuator.keda.max_streams: Input should be greater than or equal to 1",
        "keda-streams",
    ),
    (
        "actuator.keda",
        {"max_streams": 2, "max_streams_per_peer": 3},
        "actuator.keda.max_streams_per_peer: 3, must be <= max_streams (2)",
        "keda-per-peer",
    ),
    (
        "actuator.kubernetes",
        {"in_cluster": True, "kubeconfig": "/k"},
        "actuator.kubernetes: in_cluster excludes kubeconfig and context",
        "in-cluster-and-kubeconfig",
    ),
    ("state.store", "annotation", "state.store: annotation is no longer a state store", "annotation-store"),
    ("state.configmap", "Not_A_Name", "state.configmap: String should match pattern", "configmap-name"),
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
    ("server.listen", "9464", "server.listen: '9464' is not host:port", "listen"),
    ("state.store", "file", "state.path: required", "state-path"),
    ("slo.ttft_s", 0, "slo.ttft_s: Input should be greater than 0", "slo"),
    ("extra", 1, "extra: Extra inputs are not permitted", "top-level-typo"),
    ("tick_deadline_s", 0.5, "tick_deadline_s: Input should be greater than or equal to 1", "tick-deadline"),
    ("metrics.scrape.max_page_bytes", 10, "metrics.scrape.max_page_bytes:", "page-bytes"),
    ("metrics.scrape.follow_redirects", "always", "metrics.scrape.follow_redirects:", "redirects"),
    ("metrics.scrape.workers", 65, "metrics.scrape.workers:", "scrape-workers"),
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
        pytest.param("target: [unclosed", "llmscale.yaml: line 1 not valid YAML", id="yaml"),
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
    from llmscale.config import deployment_of

    doc = _with("target", {**GOOD["target"], "model": "llama-3-8b", "gpu": "h100-80gb", **target_extra})
    ctx = deployment_of(parse_config(doc, source="inline"))
    assert ctx.cold_start_s == pytest.approx(expected_s, abs=0.05)


def test_a_binary_file_is_a_config_error_not_a_traceback(tmp_path):
    p = tmp_path / "llmscale.yaml"
    p.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    with pytest.raises(
        ConfigError, match=r"^llmscale.yaml: line \d+: byte \d+ is not UTF-8: not a YAML text file"
    ):
        load_config(p)


def _float_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted paths of every float field of ``model`` and its sections (optional ones included)."""
    out = []
    for name, f in model.model_fields.items():
        path = f"{prefix}{name}"
        args = typing.get_args(f.annotation) or (f.annotation,)
        if float in args:
            out.append(path)
        for a in args:
            if isinstance(a, type) and issubclass(a, BaseModel) and a is not BaseModel:
                out.extend(_float_fields(a, f"{path}."))
    return out


FLOAT_FIELDS = _float_fields(LiveConfig)


def test_the_sweep_below_sees_the_fields_it_should():
    # Not an empty sweep: the settings this file's other tests name are in it.
    for path in ("tick_s", "guards.cooldown_up_s", "metrics.prometheus.timeout_s", "target.cold_start_s"):
        assert path in FLOAT_FIELDS, FLOAT_FIELDS


@pytest.mark.parametrize("path", FLOAT_FIELDS)
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")], ids=repr)
def test_every_float_setting_must_be_finite(tmp_path, path, bad):
    doc = _with(path, bad)
    if path.startswith("shadow."):
        doc["shadow"]["name"] = "static"  # a shadow section needs its policy
    if path.startswith("admission.node_checks."):
        doc["admission"]["node_checks"]["nodes"] = ['instance="10.0.0.5:9100"']  # and this its nodes
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, doc))
    assert str(err.value).startswith(f"llmscale.yaml: {path}: Input should be a finite number"), err.value


def test_every_numeric_guard_has_its_range_written_down():
    from llmscale.guards import GUARD_RANGES, GuardConfig

    hints = typing.get_type_hints(GuardConfig)
    numeric = {n for n, t in hints.items() if t in (int, float, int | None, float | None)}
    assert numeric == set(GUARD_RANGES), numeric ^ set(GUARD_RANGES)


# ---- whatever a file says: a config or a ConfigError, never a traceback -----------------

FUZZ_BASE: dict[str, Any] = {
    "target": {"name": "emu", "selector": {"app": "emu"}, "cold_start_s": 30},
    "metrics": {"source": "scrape", "scrape": {"emulate_url": "http://127.0.0.1:8000", "timeout_s": 2}},
    "policy": {"name": "slo", "params": {"drain_s": 30, "target_utilization": 0.9}},
    "shadow": {
        "name": "breathing",
        "params": {"queue_signal": "queue_waiting"},
        "guards": {"max_up_step": 2},
    },
    "guards": {"min_replicas": 1, "max_replicas": 8, "cooldown_up_s": 30, "max_down_ratio": 2.0},
    "tick_s": 5,
    "actuator": {"kind": "emulate", "emulate": {"url": "http://127.0.0.1:8000"}},
    "server": {"listen": "127.0.0.1:9464"},
    "decision_log": {"path": "decisions.jsonl"},
    "state": {"store": "file", "path": "state.json"},
    "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
}


#: the other half of the schema: Prometheus, KEDA, a ConfigMap state store, Kubernetes
FUZZ_KEDA: dict[str, Any] = {
    "target": {"namespace": "llm", "name": "llama", "selector": {"app": "llama"}, "tp": 2},
    "metrics": {
        "source": "prometheus",
        "prometheus": {
            "url": "http://prom:9090",
            "timeout_s": 5,
            "max_sample_age_s": 60,
            "queries": {"x": "up"},
        },
    },
    "policy": {"name": "keda-queue", "params": {"signal": "queue_waiting", "threshold": 4}},
    "mode": "dry-run",
    "actuator": {
        "kind": "keda",
        "keda": {"listen": "127.0.0.1:9090", "max_streams": 8, "max_streams_per_peer": 2},
        "kubernetes": {"kubeconfig": "/k", "context": "c"},
    },
    "state": {"store": "configmap", "configmap": "llmscale-state-llama"},
}


def _leaf_paths(doc: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if not isinstance(doc, dict):
        return [prefix]
    out = [prefix] if prefix else []
    for k, v in doc.items():
        out += _leaf_paths(v, (*prefix, k))
    return out


FUZZ_PATHS = [("emulate", *p) for p in _leaf_paths(FUZZ_BASE)] + [
    ("keda", *p) for p in _leaf_paths(FUZZ_KEDA)
]
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**400, -1, 0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["http://", "htp:/x", "127.0.0.1:99999", "\x00", "1e999", ".inf", "queue_wiating"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=st.lists(st.tuples(st.sampled_from(FUZZ_PATHS), ODD_VALUES), min_size=1, max_size=3))
def test_any_value_anywhere_is_a_config_or_a_config_error(mutations):
    from llmscale.wiring import policy_run

    base = mutations[0][0][0]
    doc = yaml.safe_load(yaml.safe_dump(FUZZ_BASE if base == "emulate" else FUZZ_KEDA))
    for (_, *path), value in mutations:
        node = doc
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = value
    try:
        cfg = parse_config(doc, source="fuzz.yaml")
    except ConfigError as e:
        assert str(e).startswith("fuzz.yaml: "), e
        return
    # What loads, builds: the policies and their guards (what `run` does before it starts).
    policy_run(cfg, cfg.policy)
    if cfg.shadow is not None:
        policy_run(cfg, cfg.shadow, cfg.shadow.guard_overrides())
    assert cfg.tick_s is None or (math.isfinite(cfg.tick_s) and cfg.tick_s >= 0.1)


def test_a_length_aware_ttft_slo_reaches_the_policies(tmp_path):
    from llmscale.config import deployment_of

    cfg = load_config(_write(tmp_path, _with("slo.ttft_per_1k_tokens_s", 0.5)))
    assert deployment_of(cfg).slo_ttft_per_1k_tokens_s == 0.5
    assert deployment_of(load_config(_write(tmp_path, GOOD))).slo_ttft_per_1k_tokens_s == 0.0
    with pytest.raises(ConfigError, match=r"slo\.ttft_per_1k_tokens_s"):
        load_config(_write(tmp_path, _with("slo.ttft_per_1k_tokens_s", -1.0)))


def test_live_slo_plans_with_the_targets_engine_settings_and_client_timeout():
    """Live ``slo`` once planned with 256 sequences and no client time-out whatever the target ran:
    the engine settings reached it through a dict key the live side did not set. Now the target's
    ``max_num_seqs`` and ``client_timeout_s`` reach the policy through the one Deployment."""
    from llmscale.wiring import policy_run

    target = {**GOOD["target"], "max_num_seqs": 64, "max_num_batched_tokens": 4096, "client_timeout_s": 30}
    doc = {**_with("target", target), "policy": {"name": "slo"}}
    cfg = parse_config(doc, source="inline")
    slo = policy_run(cfg, cfg.policy).policy.config
    assert (slo.max_num_seqs, slo.client_timeout_s) == (64, 30.0)
    dynamo = policy_run(cfg, PolicySpec(name="dynamo-sla")).policy
    assert dynamo.config.max_num_batched_tokens == 4096


def test_live_and_backtest_merge_guards_the_same_way():
    """Bounds from the deployment, then the policy's declared guards, then the user's: one function."""
    from llmscale.backtest.runner import BacktestSettings
    from llmscale.deployment import guard_config
    from llmscale.policies.base import create_policy
    from llmscale.wiring import policy_run

    cfg = parse_config({**GOOD, "policy": {"name": "slo"}}, source="inline")
    live = policy_run(cfg, cfg.policy).guards
    settings = BacktestSettings(min_replicas=1, max_replicas=10, initial_replicas=1)
    policy = create_policy("slo", settings.deployment())
    backtest = guard_config(settings.deployment(), policy, cfg.guard_overrides())
    assert live == backtest
    assert live.stabilization_down_s == 180.0  # slo's own, over the default 0
    assert (live.cooldown_up_s, live.max_replicas) == (60.0, 10)  # the file's, over both


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("gpu", "tpu-v5", "gpu = 'tpu-v5' is unknown"),
        ("model", "gpt-5", "model = 'gpt-5' is unknown"),
        ("tp", 3, "tp = 3"),
        ("model", "llama-2-70b", "needs 138 GB of weights"),  # on one H100: does not fit
    ],
)
def test_a_target_the_step_model_cannot_price_is_rejected_at_start(tmp_path, field, value, words):
    """Found from outside: `slo` with `gpu: tpu-v5` started, then failed every tick with a traceback."""
    doc = _with(f"target.{field}", value)
    doc["policy"] = {"name": "slo"}
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, doc))
    msg = str(e.value)
    assert "llmscale.yaml: target:" in msg and words in msg and "policy slo" in msg


def test_a_model_the_catalogue_lacks_is_fine_for_a_metrics_only_policy(tmp_path):
    """keda-queue reads only the engine's queue: a fine-tuned model the catalogue lacks still runs."""
    doc = _with("target.model", "mycorp/llama-3-8b-support-ft")
    doc["policy"] = {"name": "keda-queue"}
    cfg = load_config(_write(tmp_path, doc))
    assert cfg.target.model == "mycorp/llama-3-8b-support-ft"


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"nodes": []}, "admission.node_checks.nodes: List should have at least 1 item"),
        ({"nodes": ['{instance="a"}']}, "give a label-selector body"),
        ({"nodes": ['instance="a"'], "window": "5 minutes"}, "admission.node_checks.window"),
        ({"nodes": ['instance="a"'], "max_disk_io_util": 1.5}, "admission.node_checks.max_disk_io_util"),
    ],
)
def test_node_checks_settings_are_checked(tmp_path, section, match):
    doc = _with("admission", {"node_checks": section})
    with pytest.raises(ConfigError, match=match):
        load_config(_write(tmp_path, doc))


def test_node_checks_need_a_prometheus(tmp_path):
    doc = _with("admission", {"node_checks": {"nodes": ['instance="a"']}})
    doc["metrics"] = {
        "source": "scrape",
        "scrape": {"static_targets": [{"name": "r0", "url": "http://127.0.0.1:1/metrics"}]},
    }
    with pytest.raises(
        ConfigError, match=r"admission\.node_checks\.prometheus_url: required unless metrics\.prometheus\.url"
    ):
        load_config(_write(tmp_path, doc))
    ok = load_config(_write(tmp_path, _with("admission", {"node_checks": {"nodes": ['instance="a"']}})))
    assert ok.admission.node_checks is not None and ok.admission.node_checks.max_cpu_throttled_ratio == 0.1
