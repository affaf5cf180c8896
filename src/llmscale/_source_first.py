"""An import hook that prefers the compiled modules' ``.py`` sources over their mypyc builds.

Python's path finder tries extension modules before sources, so a compiled
``replica.cpython-311-*.so`` always wins over ``replica.py`` beside it. This
finder, installed only on request (``LLMSCALE_PURE_PYTHON=1``, see
``llmscale/__init__.py``), answers first for the compiled modules with their
sources.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["HOT_MODULES", "NATIVE_SOURCES", "hot_module_paths", "install", "native"]

#: The modules setup.py compiles with mypyc: the one list (setup.py, scripts/bootstrap.sh's rebuild
#: check and tests/sim/test_compiled.py read it from here).
HOT_MODULES = frozenset(
    (
        "llmscale.perf.kernel",
        "llmscale.sim.request",
        "llmscale.sim.histogram",
        "llmscale.sim.replica",
        "llmscale.sim.fleet",
    )
)
#: Modules written in C, by their source relative to the repository root: built by setup.py beside
#: the mypyc ones and, like them, left out under ``LLMSCALE_PURE_PYTHON=1`` (their callers then run
#: the Python code they accelerate; ``native`` says which).
NATIVE_SOURCES = {"llmscale.metrics._scan": "src/llmscale/metrics/_scan.c"}
_PACKAGE = Path(__file__).resolve().parent


def native(name: str) -> ModuleType | None:
    """The C module ``name`` of :data:`NATIVE_SOURCES`; None under ``LLMSCALE_PURE_PYTHON=1`` or when it
    was not built (tests/sim/test_compiled.py fails a compiled install without it)."""
    if os.environ.get("LLMSCALE_PURE_PYTHON") == "1":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def hot_module_paths() -> list[str]:
    """The compiled modules' sources relative to the repository root, sorted:
    ``src/llmscale/perf/kernel.py``, ... (what mypyc is given)."""
    return sorted("src/" + name.replace(".", "/") + ".py" for name in HOT_MODULES)


class _SourceFirst(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in HOT_MODULES:
            return None
        source = _PACKAGE.joinpath(*fullname.split(".")[1:]).with_suffix(".py")
        return importlib.util.spec_from_file_location(fullname, source)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())
