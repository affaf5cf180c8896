"""The controller core does no I/O: nothing in its import closure can open a socket, a file or a
process, talk HTTP, Kubernetes or Prometheus, or read a clock (``controller/core.py``'s contract).

The closure is taken in a fresh interpreter, so what other tests imported does not hide a new
dependency: an edit that makes ``core.py`` (or anything it imports, e.g. ``guards.py`` or a signal
module) import ``httpx`` fails here with the module's name.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import llmscale

#: modules that do I/O or wait: networking, processes, threads and event loops, the clients the
#: adapters use (HTTP, Kubernetes, Prometheus, gRPC)
IO_MODULES = (
    "socket",
    "ssl",
    "select",
    "selectors",
    "http",
    "urllib.request",
    "subprocess",
    "threading",
    "asyncio",
    "concurrent",
    "multiprocessing",
    "httpx",
    "aiohttp",
    "requests",
    "kubernetes",
    "prometheus_client",
    "grpc",
    "yaml",
    "pydantic",
)

#: calls that do I/O or read the wall clock with modules every interpreter has loaded anyway
IO_CALLS = {"open", "print", "input"}
IO_ATTRIBUTES = {("time", "sleep"), ("time", "time"), ("time", "monotonic"), ("time", "perf_counter")}


def _closure() -> list[str]:
    code = (
        "import sys, json; before = set(sys.modules); import llmscale.controller.core; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return list(json.loads(out.stdout))


def test_the_core_imports_nothing_that_does_io():
    modules = _closure()
    assert "llmscale.controller.core" in modules
    bad = sorted(m for m in modules if any(m == io or m.startswith(io + ".") for io in IO_MODULES))
    assert not bad, f"controller/core.py's import closure holds I/O modules: {bad}"
    # the adapters' modules stay out of the core too
    adapters = {"llmscale.controller.live", "llmscale.backtest.runner"}
    assert not adapters & set(modules)


def test_no_module_of_the_closure_opens_files_or_reads_the_clock():
    root = Path(llmscale.__file__).parent
    found = []
    for name in _closure():
        if not name.startswith("llmscale"):
            continue
        parts = name.split(".")[1:]
        path = root.joinpath(*parts)
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id in IO_CALLS:
                found.append(f"{path.name}:{node.lineno} {f.id}()")
            if (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and (f.value.id, f.attr) in IO_ATTRIBUTES
            ):
                found.append(f"{path.name}:{node.lineno} {f.value.id}.{f.attr}()")
    assert not found, found


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_offline_tools_live_apart_from_the_runtime_packages():
    """The fits run the simulator and read measurement files: no runtime module imports them (the
    command line, which runs ``llmscale calibrate``, is not one), and no signal module imports the
    simulator (``signals/fit_oom.py`` once did both)."""
    root = Path(llmscale.__file__).parent
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        # the command line runs the fits (``llmscale calibrate``): it sits above every room
        if rel.parts[0] in ("offline", "cli"):
            continue
        imported = _imports(path)
        if any(m == "llmscale.offline" or m.startswith("llmscale.offline.") for m in imported):
            wrong.append(f"{rel} imports llmscale.offline")
        if rel.parts[0] == "signals" and any(m.startswith("llmscale.sim") for m in imported):
            wrong.append(f"{rel} imports the simulator")
    assert not wrong, wrong


#: every module of ``policies/``, its packages' modules included (``dynamo.sla``): a policy is decided by
#: the core, so it is held to the core's rule
_POLICIES_DIR = Path(llmscale.__file__).parent / "policies"
POLICY_MODULES = sorted(
    ".".join(p.relative_to(_POLICIES_DIR).parent.parts if p.name == "__init__.py" else rel.parts)
    for p in _POLICIES_DIR.rglob("*.py")
    if (rel := p.relative_to(_POLICIES_DIR).with_suffix("")).parts != ("__init__",)
)


def _policy_path(name: str) -> Path:
    path = _POLICIES_DIR.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


#: the one module of ``policies/`` that reads a file: ``--policy-config``'s loader, called by the CLI
#: at the edge (it imports YAML when called); no policy imports it (checked below)
EDGE_LOADERS = {"config_file"}

#: methods that read or write a file through a path object
IO_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "open", "mkdir", "unlink"}


def _module_closure(module: str) -> list[str]:
    code = (
        f"import sys, json; before = set(sys.modules); import {module}; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return list(json.loads(out.stdout))


def _is_io(module: str) -> bool:
    return any(module == io or module.startswith(io + ".") for io in IO_MODULES)


@pytest.mark.parametrize("name", POLICY_MODULES)
def test_every_policy_module_is_pure(name):
    """Each policy module, imported alone in a fresh interpreter, brings no I/O module and no
    adapter; its own code opens no file, prints nothing, reads no clock and imports no I/O module
    even lazily (inside a function)."""
    modules = _module_closure(f"llmscale.policies.{name}")
    assert not [m for m in modules if _is_io(m)], f"policies/{name}'s import closure does I/O"
    adapters = {"llmscale.controller.live", "llmscale.backtest.runner"}
    assert not adapters & set(modules)
    path = _policy_path(name)
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module == "llmscale.policies.config_file"
        ):
            found.append(f"{node.lineno} imports the edge loader config_file")
        if name in EDGE_LOADERS:
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found += [f"{node.lineno} import {n}" for n in names if _is_io(n)]
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in IO_CALLS:
            found.append(f"{node.lineno} {f.id}()")
        if isinstance(f, ast.Attribute):
            if isinstance(f.value, ast.Name) and (f.value.id, f.attr) in IO_ATTRIBUTES:
                found.append(f"{node.lineno} {f.value.id}.{f.attr}()")
            if f.attr in IO_METHODS:
                found.append(f"{node.lineno} .{f.attr}()")
    assert not found, f"policies/{name}: {found}"
