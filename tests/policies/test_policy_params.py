"""Policy parameters are checked when a policy is built: kind, finiteness and signal names.

A value the factory would misread must fail at start-up naming the parameter, never at each tick:
``queue_signal: queue_wiating`` used to build a ``breathing`` policy that answered no-data every
tick (the fleet never scaled), and ``drain_s: fast`` a traceback.
"""

from __future__ import annotations

import math

import pytest

from llmscale.deployment import Deployment
from llmscale.policies.base import POLICIES, create_policy, names_a_signal, policy_names
from llmscale.policies.params import PolicyParamError
from llmscale.signals.catalog import SIGNALS
from llmscale.signals.fleet import PER_POD_METRICS

policy_names()  # loads every policy module: the registry is filled on first use

#: (policy, parameter, default) of every registered parameter
PARAMS = [
    (name, key, default) for name, info in sorted(POLICIES.items()) for key, default in info.defaults.items()
]
NUMERIC = [p for p in PARAMS if isinstance(p[2], int | float) and not isinstance(p[2], bool)]
FLAGS = [p for p in PARAMS if isinstance(p[2], bool)]
OPTIONAL = [p for p in PARAMS if p[2] is None]


def _id(p: tuple[str, str, object]) -> str:
    return f"{p[0]}.{p[1]}"


def test_signal_parameters_follow_the_convention_the_registry_checks():
    """``signal`` / ``*_signal`` parameters are checked against the catalogue by create_policy; each
    such default must be a signal itself."""
    for name, key, default in PARAMS:
        if names_a_signal(key):
            assert default in SIGNALS, f"{name}.{key} = {default!r} is not in the signal catalogue"


#: every parameter whose default is a signal's or a per-pod metric's name
NAMING = [p for p in PARAMS if isinstance(p[2], str) and (p[2] in SIGNALS or p[2] in PER_POD_METRICS)]


@pytest.mark.parametrize("param", NAMING, ids=_id)
def test_a_misspelt_name_fails_at_build_naming_the_parameter(param):
    """Whatever the parameter is called (``queue_signal``, keda's ``signal``, aibrix's and HPA's
    ``metric``), a misspelt name is a PolicyParamError when the policy is built."""
    name, key, default = param
    typo = default[:-2] + default[-1:]  # one letter dropped: 'queue_waiting' -> 'queue_waitng'
    with pytest.raises(PolicyParamError) as info:
        create_policy(name, Deployment(), {key: typo})
    assert info.value.param == key
    assert f"{key} = {typo!r}" in str(info.value)
    assert info.value.exit_code == 2
    create_policy(name, Deployment(), {key: default})  # the right name builds


@pytest.mark.parametrize("param", [p for p in PARAMS if names_a_signal(p[1])], ids=_id)
def test_a_misspelt_signal_suggests_the_closest(param):
    name, key, default = param
    typo = default[:-2] + default[-1:]
    with pytest.raises(PolicyParamError, match=f"not a signal; did you mean {default!r}"):
        create_policy(name, Deployment(), {key: typo})


@pytest.mark.parametrize("param", NUMERIC, ids=_id)
@pytest.mark.parametrize("bad", ["fast", "1.5", math.inf, -math.inf, math.nan, True, [1]], ids=repr)
def test_a_numeric_parameter_takes_only_finite_numbers(param, bad):
    name, key, _ = param
    with pytest.raises(PolicyParamError) as info:
        create_policy(name, Deployment(), {key: bad})
    assert info.value.param == key


@pytest.mark.parametrize("param", OPTIONAL, ids=_id)
@pytest.mark.parametrize("bad", ["fast", math.nan, math.inf, False], ids=repr)
def test_an_optional_number_takes_a_finite_number_or_null(param, bad):
    name, key, _ = param
    with pytest.raises(PolicyParamError) as info:
        create_policy(name, Deployment(), {key: bad})
    assert info.value.param == key
    create_policy(name, Deployment(), {key: None})


@pytest.mark.parametrize("param", FLAGS, ids=_id)
def test_a_flag_takes_only_true_or_false(param):
    name, key, default = param
    with pytest.raises(PolicyParamError, match="must be a boolean"):
        create_policy(name, Deployment(), {key: "yes"})
    create_policy(name, Deployment(), {key: not default})


def test_an_integer_beyond_any_float_is_refused_not_a_traceback():
    with pytest.raises(PolicyParamError, match="must be a finite number") as info:
        create_policy("slo", Deployment(), {"drain_s": 10**400})
    assert info.value.param == "drain_s"


def test_hpa_metric_must_be_a_per_pod_metric():
    with pytest.raises(PolicyParamError, match="must be a per-pod metric") as info:
        create_policy("hpa-gpu-util", Deployment(), {"metric": "DCGM_FI_DEV_GPU_UTL"})
    assert info.value.param == "metric"
