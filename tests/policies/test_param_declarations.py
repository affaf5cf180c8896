"""Each policy parameter is declared once (default, range, unit, help) and checked against that."""

from __future__ import annotations

import math

import pytest

from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.policies.base import POLICIES, create_policy, policy_names
from llmscale.policies.params import Param
from llmscale.ranges import Interval

NUMERIC = [
    pytest.param(name, key, id=f"{name}.{key}")
    for name in policy_names()
    for key, p in POLICIES[name].params.items()
    if p.kind in (int, float)
]


@pytest.mark.parametrize(("name", "key"), NUMERIC)
def test_every_numeric_parameter_has_a_bounded_range_around_its_default(name, key):
    p = POLICIES[name].params[key]
    assert p.range is not None, "declare the range where the default is"
    bounds = Interval.parse(p.range)
    # Bounded on both sides: values at an open end at inf overflowed, at an open 0 underflowed.
    assert math.isfinite(bounds.lo) and math.isfinite(bounds.hi), p.range
    assert p.default is None or p.default in bounds


@pytest.mark.parametrize(("name", "key"), NUMERIC)
def test_the_smallest_accepted_value_never_makes_a_tick_under_a_tenth_of_a_second(name, key):
    # "Finite positive ticks": whichever parameter sets a policy's tick, its range keeps it sane.
    p = POLICIES[name].params[key]
    bounds = Interval.parse(p.range or "(-inf, inf)")
    low = bounds.lo if bounds.lo_closed else math.nextafter(bounds.lo, math.inf)
    value = math.ceil(low) if p.kind is int else low
    try:
        policy = create_policy(name, Deployment(), {key: value})
    except ConfigError:
        return  # refused by a rule between parameters
    assert 0.1 <= policy.tick_s <= 86400, (key, value, policy.tick_s)


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        pytest.param("(0, 1]", [1e-300, 0.5, 1], [0, 1.0000001, float("nan"), True, "0.5"], id="share"),
        pytest.param("[0, inf)", [0, 1e308], [float("inf"), -1e-300, 10**400], id="open-at-inf-is-finite"),
        pytest.param("[0.1, 86400]", [0.1, 86400], [0.0999, 86400.001], id="tick"),
        pytest.param("(0, inf]", [float("inf")], [0, float("nan")], id="closed-at-inf"),
    ],
)
def test_intervals(text, inside, outside):
    bounds = Interval.parse(text)
    assert all(x in bounds for x in inside)
    assert not any(x in bounds for x in outside)
    assert str(bounds) == text


@pytest.mark.parametrize("text", ["0, 1", "(1, 0)", "[a, b]", "(0; 1)", "(nan, 1]"])
def test_bad_interval_notation(text):
    with pytest.raises(ValueError):
        Interval.parse(text)


def test_a_declaration_refusing_its_own_default_is_a_bug_found_at_import():
    with pytest.raises(ValueError, match="default"):
        Param(0.0, "(0, 1]")
    with pytest.raises(ValueError, match="kind"):
        Param(None)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        pytest.param({"target_utilization": 0}, "slo.target_utilization = 0: must be", id="zero"),
        pytest.param(
            {"target_utilization": "0.9"}, "slo.target_utilization = '0.9': must be a number", id="str"
        ),
        pytest.param({"trend_ticks": 8.0}, "slo.trend_ticks = 8.0: must be an integer", id="float-for-int"),
        pytest.param({"queue_shrink_holds": "yes"}, "must be a boolean", id="str-for-bool"),
        pytest.param(
            {"tick_s": None}, "slo.tick_s = None: must be a number in [0.1, 86400], not null", id="null"
        ),
        pytest.param(
            {"targt_utilization": 0.9}, "policy 'slo' has no parameter 'targt_utilization'", id="typo"
        ),
    ],
)
def test_create_policy_names_the_parameter(params, message):
    with pytest.raises(ConfigError) as err:
        create_policy("slo", Deployment(), params)
    assert message in str(err.value)


def test_an_integral_value_is_accepted_for_a_number():
    policy = create_policy("slo", Deployment(), {"tick_s": 10})
    assert policy.tick_s == 10.0 and isinstance(policy.tick_s, float)
