"""The default target's facts are written once, in ``Deployment``, and everything else reads them.

Model, GPU, TP, the SLOs, the cold start, the engine's scheduler settings and the bounds had their
own literal in ``BacktestSettings``, ``run``'s ``target:``, ``SloConfig`` (a cold start of 110 s
where the deployment said 90), eleven policy configs and three commands' options. These tests
compare every such default with :data:`~llmscale.deployment.DEFAULT_DEPLOYMENT`, and refuse a
new literal copy of the default model or GPU anywhere else in the package.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path

import pytest
import typer

from llmscale.backtest.runner import BacktestSettings
from llmscale.config import TargetConfig
from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.policies.base import policy_names
from llmscale.policies.slo import SloConfig
from llmscale.policies.standby import StandbyConfig
from llmscale.sim.config import SimConfig

SRC = Path(__file__).resolve().parents[2] / "src" / "llmscale"

#: facts a policy config may carry under the deployment's own name
_SHARED = ("model", "gpu", "tp", "slo_ttft_s", "slo_tpot_s", "slo_ttft_per_1k_tokens_s", "cold_start_s",
           "wake_s", "max_num_seqs", "max_num_batched_tokens", "min_replicas", "max_replicas")  # fmt: skip
#: KEDA's own documented default: minReplicaCount 0 (scale to zero), not the deployment's bound
_PEER_DEFAULTS = {("KedaConfig", "min_replicas")}


def test_the_default_cold_start_is_the_default_fleets_lifecycle():
    # 60 s pending + 20 s loading + 10 s warm-up: a BacktestSettings without with_cold_start()
    # plans with the fleet it runs
    sim = SimConfig()
    assert DEFAULT_DEPLOYMENT.cold_start_s == sim.pending_s + sim.loading_s + sim.warmup_s == 90.0
    assert DEFAULT_DEPLOYMENT.wake_s == sim.wake_s
    assert (DEFAULT_DEPLOYMENT.max_num_seqs, DEFAULT_DEPLOYMENT.max_num_batched_tokens) == (
        sim.max_num_seqs,
        sim.max_num_batched_tokens,
    )


def test_a_default_backtest_plans_with_the_default_deployment():
    built = BacktestSettings().deployment()
    # the backtest's own fleet (max 64, 4 warm at the start) and the simulator's client time-out
    # are its own; every other fact is the deployment's
    own = {"max_replicas", "initial_replicas", "client_timeout_s"}
    for f in dataclasses.fields(Deployment):
        if f.name not in own:
            assert getattr(built, f.name) == getattr(DEFAULT_DEPLOYMENT, f.name), f.name


def test_runs_target_defaults_are_the_deployments():
    target = TargetConfig(name="llm")
    for name in ("model", "gpu", "tp", "max_num_seqs", "max_num_batched_tokens"):
        assert getattr(target, name) == getattr(DEFAULT_DEPLOYMENT, name), name


@pytest.mark.parametrize("config", [SloConfig, StandbyConfig], ids=lambda c: c.__name__)
def test_slo_configs_defaults_are_the_deployments(config):
    values = config()
    for name in _SHARED:
        if hasattr(values, name):
            assert getattr(values, name) == getattr(DEFAULT_DEPLOYMENT, name), f"{config.__name__}.{name}"


def test_every_policy_configs_defaults_are_the_deployments():
    policy_names()  # imports every policy module
    checked = []
    for module in [m for name, m in sys.modules.items() if name.startswith("llmscale.policies.")]:
        for cls in vars(module).values():
            if not (
                isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
            ):
                continue
            for f in dataclasses.fields(cls):
                if f.name in _SHARED and f.default is not dataclasses.MISSING:
                    if (cls.__name__, f.name) in _PEER_DEFAULTS:
                        continue
                    assert f.default == getattr(DEFAULT_DEPLOYMENT, f.name), f"{cls.__name__}.{f.name}"
                    checked.append(f"{cls.__name__}.{f.name}")
    assert len(checked) >= 20, checked  # eleven configs' bounds, slo's and standby's facts


def test_command_line_defaults_are_the_deployments():
    from llmscale.cli import app

    command = typer.main.get_command(app)
    seen = 0
    for sub in command.commands.values():  # type: ignore[attr-defined]
        for param in sub.params:
            if param.name in _SHARED and param.default is not None:
                assert param.default == getattr(DEFAULT_DEPLOYMENT, param.name), f"{sub.name} --{param.name}"
                seen += 1
    assert seen >= 10  # backtest, tune and emulate's model/GPU/TP, SLOs and lower bound


def test_the_default_model_and_gpu_are_written_only_in_deployment_py():
    """No default (a field, a parameter's default, a keyword default) spells the model or GPU again."""
    facts = {DEFAULT_DEPLOYMENT.model, DEFAULT_DEPLOYMENT.gpu}
    copies = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "deployment.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            values: list[ast.expr] = []
            if isinstance(node, ast.AnnAssign) and node.value is not None:
                values.append(node.value)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                values += [d for d in (*node.args.defaults, *node.args.kw_defaults) if d is not None]
            for v in values:
                if isinstance(v, ast.Constant) and v.value in facts:
                    copies.append(f"{path.relative_to(SRC)}:{v.lineno} {v.value!r}")
    assert copies == [], copies
