"""--policy-config files: what loads, and how each kind of mistake is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscale.errors import ConfigError
from llmscale.policies.config_file import load_policy_config


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "policies.yaml"
    p.write_text(text)
    return p


def test_a_valid_file_loads_as_written(tmp_path):
    text = (
        "slo:\n  target_utilization: 0.9\n  tick_s: 10\n  guards:\n    max_down_step: 2\n"
        "keda-queue:\nstatic: {replicas: 4}\n"
    )
    got = load_policy_config(_write(tmp_path, text))
    # Values stay as written (10, not 10.0): they are echoed in the backtest's JSON config.
    assert got == {
        "slo": {"target_utilization": 0.9, "tick_s": 10, "guards": {"max_down_step": 2}},
        "keda-queue": {},
        "static": {"replicas": 4},
    }
    assert type(got["slo"]["tick_s"]) is int


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("slo:\n  tick_s: [1\n", "policies.yaml: line 3 not valid YAML", id="yaml-syntax"),
        pytest.param(
            "- slo\n", "expected a mapping of policy name -> parameters, got a YAML list", id="list"
        ),
        pytest.param(
            "slo: 5\n", "slo: expected a mapping of parameter -> value, got a YAML integer", id="scalar"
        ),
        pytest.param("slo:\n  guards: 5\n", "slo.guards: expected a mapping", id="guards-scalar"),
        pytest.param(
            "slo:\n  guards: {cooldwn_up_s: 5}\n", "slo.guards.cooldwn_up_s: unknown guard setting", id="typo"
        ),
        pytest.param(
            "slo:\n  guards: {min_replicas: 5, max_replicas: 3}\n", "slo.guards.max_replicas = 3", id="bounds"
        ),
        pytest.param(
            "slo:\n  nope: 1\n", "slo: policy 'slo' has no parameter 'nope'", id="unknown-parameter"
        ),
        pytest.param("3: {}\n", "3: unknown policy", id="number-as-name"),
        pytest.param("SLO: {}\n", "SLO: unknown policy; did you mean 'slo'?", id="case"),
    ],
)
def test_mistakes_name_the_file_and_the_key_path(tmp_path, text, message):
    with pytest.raises(ConfigError) as err:
        load_policy_config(_write(tmp_path, text))
    assert str(err.value).startswith(f"{tmp_path / 'policies.yaml'}:")
    assert message in str(err.value), str(err.value)


def test_guard_bounds_given_alone_are_left_to_the_backtest(tmp_path):
    # min_replicas 200 is fine on its own: the backtest checks it against its max when it builds the policy.
    assert load_policy_config(_write(tmp_path, "slo:\n  guards: {min_replicas: 200}\n"))


def test_an_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the policy config"):
        load_policy_config(tmp_path / "absent.yaml")
