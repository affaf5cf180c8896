"""A policy's config dataclass repeats its parameters' defaults (160 fields over the policies, so
that a test can build a config without the registry); the registry's ``Param`` is the declaration
the CLI, ``llmscale policies`` and config validation read. Until the dataclasses derive their
defaults from it, this pins that the two agree, so a default changed in one place fails here."""

from __future__ import annotations

import dataclasses

import pytest

from llmscale.policies.base import POLICIES, PolicyContext, create_policy, policy_names


@pytest.mark.parametrize("name", policy_names())
def test_every_config_default_is_the_declared_default(name):
    info = POLICIES[name]
    policy = create_policy(name, PolicyContext())
    config = getattr(policy, "config", None)
    if config is None or not dataclasses.is_dataclass(config):
        pytest.skip(f"{name} keeps no config dataclass")
    differ = {
        f.name: (f.default, info.params[f.name].default)
        for f in dataclasses.fields(config)
        if f.name in info.params
        and f.default is not dataclasses.MISSING
        and info.params[f.name].default is not None  # None: derived from the deployment when built
        and f.default != info.params[f.name].default
    }
    assert not differ, f"{name}: config default vs Param default: {differ}"
