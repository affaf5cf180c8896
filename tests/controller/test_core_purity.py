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
    adapters = {"llmscale.controller.live", "llmscale.controller.loop", "llmscale.backtest.runner"}
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
    """The fits run the simulator and read measurement files: no runtime module imports them, and
    no signal module imports the simulator (``signals/fit_oom.py`` once did both)."""
    root = Path(llmscale.__file__).parent
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "offline":
            continue
        imported = _imports(path)
        if any(m == "llmscale.offline" or m.startswith("llmscale.offline.") for m in imported):
            wrong.append(f"{rel} imports llmscale.offline")
        if rel.parts[0] == "signals" and any(m.startswith("llmscale.sim") for m in imported):
            wrong.append(f"{rel} imports the simulator")
    assert not wrong, wrong
