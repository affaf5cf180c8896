"""tests/e2e: the live controller's acceptance tests on real processes (issue 4).

Fixtures: ``prometheus_server`` (a real Prometheus, tests/support), ``workdir`` (a temp
directory removed after the test), ``procs`` (starts children and stops every one of them
after the test, passed or failed).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.prometheus_server import prometheus_server

# e2e_procs.py is imported by plain module name, like tests/live's helpers.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from e2e_procs import Proc, remove_tree  # noqa: E402 (after the path insert)

__all__ = ["procs", "prometheus_server", "workdir"]


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="llmscale-e2e-"))
    try:
        yield path
    finally:
        remove_tree(path)


@pytest.fixture
def procs(workdir: Path) -> Iterator[Callable[..., Any]]:
    """``procs(cls, *args, **kwargs)`` builds a :class:`Proc` (or subclass) and stops it after the test.

    Stopped in reverse order of start (the controller before the fleet it scales).
    """
    started: list[Proc] = []

    def start(cls: type[Proc], *args: Any, **kwargs: Any) -> Any:
        p = cls(*args, **kwargs)
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in reversed(started):
            p.stop()
