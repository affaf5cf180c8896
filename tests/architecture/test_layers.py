"""Imports run down the layers: a module may import its own layer and those below, never above.

The ranking is ARCHITECTURE.md's picture of the rooms, from the values every layer shares at the
bottom to the command line on top. Every ``import`` in ``src/llmscale`` counts, at module level,
inside a function or under ``TYPE_CHECKING`` alike: a function-level import that runs up is the
same dependency, only hidden (``perf/closed_batch.py`` ran the simulator's fleet from inside a
function while ``sim`` imports ``perf``; the fits that replay on the simulator now live in
``offline/``). A new top-level module or package must be given a rank here, so the test also
fails on one it does not know.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "llmscale"

#: rank of each top-level module or package of llmscale (lower = nearer the bottom). Within a rank
#: imports go either way; across ranks only downwards.
RANKS: dict[str, int] = {
    # values that cross every layer, the SLO test, time, errors
    "__init__": 0,
    "_source_first": 0,
    "errors": 0,
    "ranges": 0,
    # the served model's number formats (vLLM's dtype names): validated at the edge without the model
    "precision": 0,
    "types": 0,
    "clock": 0,
    "gc_tick": 0,
    "slo": 0,
    # the same-hour rate history a Signals value carries to the policies (a value, like types)
    "history": 0,
    # the edge's strict readers (option values, YAML/JSON documents)
    "edge": 1,
    "documents": 1,
    # reading the world: metric names, Prometheus and pod /metrics sources
    "metrics": 2,
    # pure computation over the world: the execution-time model, signals, workloads, guards
    "perf": 3,
    "signals": 3,
    "workloads": 3,
    "guards": 3,
    # replica bounds by cron window, which the guards apply
    "schedules": 3,
    # the seasonal forecast over that history, which a policy calls
    "seasonal": 3,
    # what a policy knows about its target; GPU sharing
    "deployment": 4,
    "tenancy": 4,
    # GPU prices and the cheapest mix of GPU types (the deployment names its types and prices)
    "mix": 4,
    # the simulator
    "sim": 5,
    # policies; the fits that replay on the simulator; the Cluster protocol and its adapters
    "policies": 6,
    "offline": 6,
    "cluster": 6,
    # the one controller core and the live loop
    "controller": 7,
    # the adapters: backtest (simulated time), emulate (simulated replicas over HTTP), load
    "backtest": 8,
    "emulate": 8,
    "loadgen": 8,
    # presenting results; the versioned schemas of every command's --json document
    "report": 9,
    "outputs": 9,
    "schemas": 9,
    "analyze": 10,
    "tune": 10,
    # the configuration edge and the composition root that builds the live controller from it
    "config": 10,
    "wiring": 11,
    # the command line (one module per command group, the options, logging and JSON writing its
    # commands share) and ``python -m llmscale``
    "cli": 12,
    "__main__": 12,
}


def _unit(module: str) -> str:
    """``llmscale.sim.fleet`` -> ``sim``; ``llmscale`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_of(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) of every import in ``path``, relative ones resolved."""
    module = _module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imports_in(path.read_text(), package)


def _imports_in(text: str, package: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from llmscale import sim`` imports the package sim
            if target == "llmscale":
                found += [(node.lineno, f"llmscale.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return [(line, name) for line, name in found if name == "llmscale" or name.startswith("llmscale.")]


SOURCES = sorted(p for p in SRC.rglob("*.py") if "_pb2" not in p.name)


def test_every_unit_is_ranked():
    units = {_unit(_module_of(p)) for p in SOURCES}
    assert sorted(units - set(RANKS)) == [], "give each new module or package a rank in RANKS"


def test_imports_never_run_up():
    upward = []
    for path in SOURCES:
        here = _unit(_module_of(path))
        for line, target in _imports(path):
            there = _unit(target)
            if RANKS.get(there, -1) > RANKS.get(here, -1):
                upward.append(
                    f"{path.relative_to(SRC.parent)}:{line} imports {target} "
                    f"({there}, rank {RANKS[there]}) from {here} (rank {RANKS.get(here)})"
                )
    assert upward == [], "\n".join(upward)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("from llmscale.sim.fleet import Fleet\n", [(1, "llmscale.sim.fleet")], id="absolute"),
        pytest.param("def f():\n    import llmscale.report\n", [(2, "llmscale.report")], id="in-a-function"),
        pytest.param("from llmscale import cli\n", [(1, "llmscale.cli")], id="package-attribute"),
        pytest.param("from ..sim import fleet\n", [(1, "llmscale.sim")], id="relative"),
    ],
)
def test_imports_are_all_found(source, expected):
    # as in a module of the package llmscale.perf
    assert _imports_in(source, "llmscale.perf") == expected
