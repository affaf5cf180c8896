"""GuardConfig refuses what would make a guard act backwards or silently not at all."""

from __future__ import annotations

import pytest

from llmscale.errors import ConfigError
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.types import Decision, FleetView, Signals


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        # A negative step put the floor above the fleet: 10 - (-3) = 13 for a wish of 1.
        pytest.param("max_down_step", -3, "max_down_step = -3, must be >= 0", id="down-step-negative"),
        pytest.param("max_up_step", -1, "max_up_step = -1, must be >= 1", id="up-step-negative"),
        # 0 never scaled up in a backtest, while `run` refused it (issue 19): one range for both
        pytest.param("max_up_step", 0, "max_up_step = 0, must be >= 1", id="up-step-zero"),
        pytest.param("max_replicas", 10**11, "max_replicas = 100000000000, must be <= 10,000", id="huge"),
        pytest.param("gpu_budget", -8, "gpu_budget = -8, must be >= 1", id="budget-negative"),
        pytest.param(
            "gpus_per_replica", 0, "gpus_per_replica = 0, must be within [1, 1,024]", id="gpus-per-replica"
        ),
        # a 400-digit count made every gpu_budget room for zero replicas, without a word
        pytest.param(
            "gpus_per_replica",
            10**400,
            "gpus_per_replica = 100000000000... (401 characters), must be within [1, 1,024]",
            id="gpus-per-replica-huge",
        ),
        # NaN compares false with everything: a NaN cooldown never held anything back.
        pytest.param("cooldown_up_s", float("nan"), "cooldown_up_s = nan, must be a finite number", id="nan"),
        pytest.param("stabilization_down_s", float("inf"), "must be a finite number", id="inf"),
        pytest.param("max_down_ratio", float("nan"), "max_down_ratio = nan", id="ratio-nan"),
        pytest.param("max_down_step", "3", "max_down_step = '3', must be an integer or null", id="string"),
        pytest.param("max_down_step", 2.5, "must be an integer or null", id="fraction"),
        pytest.param(
            "hold_on_missing_data", 1, "hold_on_missing_data = 1, must be a boolean", id="int-for-bool"
        ),
        pytest.param("cooldown_up_s", True, "cooldown_up_s = True, must be a number", id="bool-for-number"),
        pytest.param("cooldown_up_s", [30], "must be a number", id="list"),
    ],
)
def test_bad_settings_are_refused(setting, value, message):
    with pytest.raises(ConfigError) as err:
        GuardConfig().merged({setting: value})
    assert message in str(err.value)


def test_a_zero_down_step_holds_and_a_valid_one_limits_the_shrink():
    signals = Signals(time_s=0.0, fleet=FleetView(spec_replicas=10, ready=10), values={})
    wish = Decision(1, "test")
    for step, want in ((0, 10), (3, 7)):
        cfg = GuardConfig(min_replicas=1, max_replicas=20, drain_aware=False, headroom_max_usage=None)
        out, _ = apply_guards(wish, signals, cfg.merged({"max_down_step": step}), GuardState(), 100.0)
        assert out.desired == want, (step, out)


def test_integral_numbers_of_any_kind_pass():
    import numpy as np

    cfg = GuardConfig(np.int64(1), np.int64(5), cooldown_up_s=30, max_up_ratio=np.float64(2.0))
    assert cfg.max_replicas == 5
