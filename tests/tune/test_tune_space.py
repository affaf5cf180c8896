"""The search space comes from the policies' declared parameters, not from a second list."""

from __future__ import annotations

import math

import pytest

from llmscale.errors import ConfigError
from llmscale.policies.base import POLICIES, policy_names
from llmscale.tune.space import SPAN, parse_param_options, search_space


def _slo_space(chosen=None):
    policy_names()  # loads every policy module
    return {p.name: p for p in search_space(POLICIES["slo"], chosen)}


@pytest.mark.parametrize(
    ("name", "low", "high", "log"),
    [
        # 0.95 x/÷ 4, clipped to the declared [0.01, 1]
        pytest.param("target_utilization", 0.95 / SPAN, 1.0, True, id="clipped-share"),
        pytest.param("drain_s", 7.5, 120.0, True, id="duration"),
        # 8 / 4 .. 8 x 4, an integer
        pytest.param("trend_ticks", 2, 32, True, id="integer"),
        pytest.param("tick_s", 3.75, 60.0, True, id="tick"),
    ],
)
def test_windows_around_the_declared_defaults(name, low, high, log):
    p = _slo_space()[name]
    assert (p.low, p.high, p.log) == (pytest.approx(low), pytest.approx(high), log)
    assert p.default == POLICIES["slo"].params[name].default


def test_what_is_not_searched_without_a_window():
    space = _slo_space()
    # default 0 gives no scale; None is derived from the deployment
    assert "burst_z" not in space and "client_timeout_s" not in space
    assert space["queue_shrink_holds"].choices == (True, False)


def test_a_named_window_is_checked_against_the_declared_range():
    space = _slo_space(parse_param_options(["burst_z=0:3", "alpha"]))
    assert list(space) == ["burst_z", "alpha"]
    assert (space["burst_z"].low, space["burst_z"].high) == (0.0, 3.0)
    in_range = r"slo\.target_utilization = 1\.5 must be a finite number in \[0\.01, 1\]"
    with pytest.raises(ConfigError, match=in_range):
        _slo_space(parse_param_options(["target_utilization=0.5:1.5"]))
    with pytest.raises(ConfigError, match="has no default to search around"):
        _slo_space(parse_param_options(["burst_z"]))
    with pytest.raises(ConfigError, match="has no parameter 'alpah'"):
        _slo_space(parse_param_options(["alpah"]))


@pytest.mark.parametrize("bad", ["x=1", "x=a:b", "x=2:1", "=1:2", "x=nan:1"])
def test_malformed_param_options(bad):
    with pytest.raises(ConfigError, match="--param"):
        parse_param_options([bad])


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_window_holds_values_the_policy_accepts(policy):
    """For every registered policy: each window's ends and its default are values the declaration
    accepts (an open end of a range is stepped inside), so no trial is refused for its range."""
    info = POLICIES[policy]
    try:
        space = search_space(info)
    except ConfigError:
        pytest.skip(f"{policy} has no parameter with a default to search around")
    for p in space:
        declared = info.params[p.name]
        values = list(p.choices) if p.choices else [p.low, p.high]
        for v in values:
            v = int(v) if p.kind is int else v
            assert declared.problem(v) is None, (policy, p.name, v)
        assert p.contains(p.default), (policy, p.name, p.default, p.describe())
        if not p.choices:
            assert math.isfinite(p.low) and math.isfinite(p.high) and p.low < p.high
