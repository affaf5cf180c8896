"""Each policy declares the signals it reads; the declarations are checked against the catalogue
when a policy is built, and against the policy modules' own code here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import llmscale.policies as policies_pkg
from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.policies.base import POLICIES, PolicyInfo, create_policy, policy_names
from llmscale.policies.static import StaticPolicy
from llmscale.signals.catalog import SIGNALS


def _literal_reads(path: Path) -> set[str]:
    """Catalogue names a module reads with ``signals.get("name")`` or ``signals.values["name"]``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in SIGNALS
        ):
            found.add(node.args[0].value)
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value in SIGNALS
        ):
            found.add(node.slice.value)
    return found


def test_every_declared_read_is_a_catalogue_signal():
    names = policy_names()
    assert names
    for name in names:
        assert set(POLICIES[name].reads) <= set(SIGNALS), name


def test_a_policy_module_reads_no_signal_its_policies_do_not_declare():
    policy_names()  # loads every module
    by_module: dict[str, set[str]] = {}
    for info in POLICIES.values():
        module = info.factory.__module__.removeprefix("llmscale.policies.")  # "slo", "dynamo.sla"
        by_module.setdefault(module, set()).update(info.reads)
    root = Path(policies_pkg.__file__).parent
    undeclared = {}
    for module, declared in by_module.items():
        missing = _literal_reads(root.joinpath(*module.split(".")).with_suffix(".py")) - declared
        if missing:
            undeclared[module] = sorted(missing)
    assert not undeclared, f"signals read but not declared in register(..., reads=...): {undeclared}"


def test_signals_read_adds_what_a_parameter_names():
    policy_names()
    info = POLICIES["keda-queue"]
    assert info.signals_read(info.check_params({"signal": "running"})) == ("running",)
    hybrid = POLICIES["hybrid"]
    reads = hybrid.signals_read(hybrid.defaults)
    assert {"gpu_util_mean", "running", hybrid.defaults["queue_signal"]} <= set(reads)


def test_an_unknown_declared_read_is_a_configuration_error(monkeypatch):
    policy_names()

    def factory(ctx, params):
        return StaticPolicy(replicas=1)

    info = PolicyInfo("typo-policy", "reads a misspelt signal", factory, {}, reads=("queue_wiating",))
    monkeypatch.setitem(POLICIES, "typo-policy", info)
    with pytest.raises(
        ConfigError, match=r"'queue_wiating': not in the signal catalogue.*did you mean 'queue_waiting'"
    ):
        create_policy("typo-policy", Deployment())
