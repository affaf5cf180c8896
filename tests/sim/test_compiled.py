"""Which simulator is imported: mypyc-compiled (setup.py) or the plain sources, and never a stale build.

A compiled module shadows its ``.py`` on import, so an edit to ``sim/replica.py``
without a rebuild would silently test the old code. ``scripts/bootstrap.sh``
rebuilds when these sources change; this test catches a run that skipped it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from llmscale._source_first import HOT_MODULES


@pytest.mark.parametrize("name", sorted(HOT_MODULES))
def test_hot_module_is_compiled_and_fresh(name: str) -> None:
    mod = importlib.import_module(name)
    path = Path(str(mod.__file__))
    if os.environ.get("LLMSCALE_PURE_PYTHON") == "1":
        assert path.suffix == ".py", f"LLMSCALE_PURE_PYTHON=1 but {path.name} is compiled"
        return
    assert path.suffix == ".so", (
        f"{name} is imported from {path.name}, not a mypyc build: run scripts/bootstrap.sh "
        "(or set LLMSCALE_PURE_PYTHON=1 to test the plain sources on purpose)"
    )
    source = path.with_name(name.rsplit(".", 1)[1] + ".py")
    assert source.stat().st_mtime <= path.stat().st_mtime, (
        f"{path.name} is older than {source.name}: the compiled simulator is stale; run scripts/bootstrap.sh"
    )
