"""A policy parameter's default is written once: in ``param(...)`` on its config dataclass's field.

The registry's :class:`Param` (which ``llmscale policies``, ``--policy-config`` and ``llmscale tune``
read) is the object ``param`` keeps in the field's metadata, so there is no second copy to drift:
a test building a config without the registry gets the declared defaults too.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import pytest

import llmscale.policies as policies_pkg
from llmscale.deployment import Deployment
from llmscale.policies import base
from llmscale.policies.base import POLICIES, create_policy, policy_names
from llmscale.policies.params import PARAM_METADATA_KEY, Param, config_from, param, params_of

POLICY_MODULES = sorted(Path(policies_pkg.__file__).parent.rglob("*.py"))


def _config_dataclasses(policy: object) -> list[tuple[str, object]]:
    """(the attribute holding it, or "", the dataclass value) for the policy and every dataclass it
    keeps: its config, a nested ``behavior`` or ``standby``, ..."""
    found: list[tuple[str, object]] = []
    todo: list[tuple[str, object]] = [("", policy)]
    while todo:
        attr, value = todo.pop()
        seen = any(value is v for _, v in found)
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and not seen:
            found.append((attr, value))
            todo.extend((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    return found


@pytest.mark.parametrize("name", policy_names())
def test_a_config_field_named_like_a_parameter_holds_that_very_declaration(name):
    info = POLICIES[name]
    policy = create_policy(name, Deployment())
    checked = []
    for attr, config in _config_dataclasses(policy):
        for f in dataclasses.fields(config):
            # A nested config's parameters are registered under its attribute's name (slo's
            # ``standby_memory_s`` is ``config.standby.memory_s``) or under their own.
            key = next((k for k in (f.name, f"{attr}_{f.name}") if k in info.params), None)
            if key is None or f.default is dataclasses.MISSING:
                continue  # not a parameter, or a field without a default of its own
            declared = info.params[key]
            if declared.default is None and f.metadata.get(PARAM_METADATA_KEY) is not declared:
                # "Taken from the deployment (or from another parameter) when built": the field's
                # own default is the value without a deployment, a different fact.
                continue
            assert f.metadata.get(PARAM_METADATA_KEY) is declared, (
                f"{name}: {type(config).__name__}.{f.name} writes its default apart from the "
                f"declaration of {key}; give the field `= param(...)` and register params_of(...)"
            )
            assert f.default == declared.default
            checked.append(key)
    if name != "static":  # its one parameter, replicas, defaults to the deployment's initial replicas
        assert checked, f"{name}: no config field carries a declaration"
    if name == "slo":  # the nested standby pool's, under their prefix
        assert {"standby_replicas", "standby_memory_s", "standby_gpu_s_per_miss"} <= set(checked)


def _literal_defaults_and_declared_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(fields of the module's classes with a default other than ``param(...)``, keys of dict
    entries ``"name": Param(<not None>, ...)``)."""
    fields: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for st in cls.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                is_param = isinstance(st.value, ast.Call) and getattr(st.value.func, "id", "") == "param"
                if not is_param:
                    fields.add(st.target.id)
    declared: set[str] = set()
    for d in (n for n in ast.walk(tree) if isinstance(n, ast.Dict)):
        for k, v in zip(d.keys, d.values, strict=True):
            if (
                isinstance(k, ast.Constant)
                and isinstance(v, ast.Call)
                and getattr(v.func, "id", "") == "Param"
                and v.args
                and not (isinstance(v.args[0], ast.Constant) and v.args[0].value is None)
            ):
                declared.add(k.value)
    return fields, declared


@pytest.mark.parametrize(
    "path", POLICY_MODULES, ids=lambda p: str(p.relative_to(Path(policies_pkg.__file__).parent))
)
def test_no_policy_module_declares_a_parameter_beside_a_field_of_its_name(path):
    # The pattern this replaced: `alpha: float = 0.4` in the dataclass and `"alpha": Param(0.4, ...)`
    # in the registered mapping, two copies a test had to keep in agreement.
    fields, declared = _literal_defaults_and_declared_names(ast.parse(path.read_text()))
    assert not fields & declared, (
        f"{path.name}: declared apart from their fields: {sorted(fields & declared)}"
    )


def test_the_ast_check_finds_a_second_copy():
    tree = ast.parse(
        "@dataclass\nclass C:\n    alpha: float = 0.4\n    beta: float = param(0.1)\n"
        "P = {'alpha': Param(0.4, '(0, 1]'), 'beta_pct': Param(10.0), 'gamma': Param(None, kind=float)}\n"
    )
    fields, declared = _literal_defaults_and_declared_names(tree)
    assert fields & declared == {"alpha"}


# A module's declaration edited in its source: the config dataclass's default and the registry's
# both follow. (module, the field's line as written, the same line with another default, the field)
EDITS = [
    pytest.param(
        "slo",
        'alpha: float = param(0.4, "(0, 1]"',
        'alpha: float = param(0.5, "(0, 1]"',
        ("slo", "SloConfig", "alpha", 0.5),
        id="slo.alpha",
    ),
    pytest.param(
        "knative",
        "target_concurrency: float = param(70.0,",
        "target_concurrency: float = param(35.0,",
        ("knative-kpa", "KpaConfig", "target_concurrency", 35.0),
        id="knative-kpa.target_concurrency",
    ),
    pytest.param(
        "dynamo/sla",
        'max_throughput_scaling_replicas: int = param(\n        8, f"[1, {COUNT_MAX}]"',
        'max_throughput_scaling_replicas: int = param(\n        3, f"[1, {COUNT_MAX}]"',
        ("dynamo-sla", "DynamoSlaConfig", "max_throughput_scaling_replicas", 3),
        id="dynamo-sla.max_throughput_scaling_replicas",
    ),
]


@pytest.mark.parametrize(("module", "written", "edited", "expect"), EDITS)
def test_editing_a_declaration_changes_the_dataclass_default_and_the_registry(
    monkeypatch, module, written, edited, expect
):
    policy, config_name, key, value = expect
    path = Path(policies_pkg.__file__).parent / f"{module}.py"
    source = path.read_text()
    assert source.count(written) == 1, f"{module}.py no longer writes {written!r}; update this test"
    # Registering the edited module must not replace the real policy for the other tests.
    monkeypatch.setattr(base, "POLICIES", dict(base.POLICIES))
    name = f"_edited_{module}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    edited_module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, edited_module)
    exec(compile(source.replace(written, edited), str(path), "exec"), edited_module.__dict__)

    assert getattr(edited_module, config_name)().__getattribute__(key) == value
    assert base.POLICIES[policy].params[key].default == value
    assert POLICIES[policy].params[key].default != value  # the real registry is untouched


def test_param_is_the_field_default_and_the_declaration():
    @dataclasses.dataclass(frozen=True)
    class Config:
        window_s: float = param(60.0, "(0, 600]", unit="s", help="averaging window")
        mode: str = param("fast", choices=("fast", "slow"))
        floor: int = 1  # not a parameter: the deployment gives it

    assert Config().window_s == 60.0
    declared = params_of(Config)
    assert list(declared) == ["window_s", "mode"]
    assert declared["window_s"] == Param(60.0, "(0, 600]", unit="s", help="averaging window")
    assert declared["mode"].choices == ("fast", "slow")


def test_a_declaration_its_own_range_refuses_fails_at_definition():
    with pytest.raises(ValueError, match=re.escape("Param default 0.0: must be a finite number in (0, 1]")):
        param(0.0, "(0, 1]")


@pytest.mark.parametrize(
    ("params", "rest", "expect"),
    [
        pytest.param({}, {}, (60.0, "fast", 1), id="declared-defaults"),
        pytest.param({"window_s": 30.0, "other": 5}, {}, (30.0, "fast", 1), id="not-a-field-is-left-out"),
        pytest.param({"window_s": 30.0}, {"window_s": 10.0, "floor": 3}, (10.0, "fast", 3), id="rest-wins"),
    ],
)
def test_config_from(params, rest, expect):
    @dataclasses.dataclass(frozen=True)
    class Config:
        window_s: float = param(60.0, "(0, 600]", unit="s")
        mode: str = param("fast", choices=("fast", "slow"))
        floor: int = 1

    built = config_from(Config, params, **rest)
    assert (built.window_s, built.mode, built.floor) == expect


def test_a_nested_config_is_registered_and_built_under_its_prefix():
    @dataclasses.dataclass(frozen=True)
    class Pool:
        memory_s: float = param(3600.0, "(0, 604800]", unit="s")
        wake_s: float = 2.0  # the deployment's

    assert list(params_of(Pool, prefix="pool_")) == ["pool_memory_s"]
    built = config_from(Pool, {"pool_memory_s": 60.0, "memory_s": 5.0}, prefix="pool_", wake_s=1.0)
    assert (built.memory_s, built.wake_s) == (60.0, 1.0)
