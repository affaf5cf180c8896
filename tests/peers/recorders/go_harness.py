"""Compile a peer's real Go file(s) beside a small harness, offline, and run it.

A peer's decision function is taken unmodified from its repository at a pinned commit (``git
show`` from a local clone) into a temporary module that also holds this directory's harness for
that peer: the few declarations the file takes from the rest of its package, scripted inputs and a
``cmd/record`` main. Imports the function only logs or records metrics through resolve to no-op
stub modules (``replace`` directives), so the build needs no module download: GOPROXY=off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path


def resolve(git_dir: Path, rev: str) -> str:
    """The commit ``rev`` (a tag) names in ``git_dir``."""
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "rev-parse", f"{rev}^{{commit}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def run_harness(
    harness: Path,
    module: str,
    git_dir: Path,
    commit: str,
    real_files: Sequence[str],
    stubs: Mapping[str, Path],
    stdin: str,
) -> str:
    """Build ``harness`` (the module's tree) with ``real_files`` from ``commit`` and run
    ``./cmd/record`` with ``stdin``; its stdout."""
    texts = {rel: _git_show(git_dir, f"{commit}:{rel}") for rel in real_files}
    return run_harness_texts(harness, module, texts, stubs, stdin)


def _git_show(git_dir: Path, spec: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", spec], capture_output=True, text=True, check=True
    ).stdout


def run_harness_texts(
    harness: Path, module: str, texts: Mapping[str, str], stubs: Mapping[str, Path], stdin: str
) -> str:
    """:func:`run_harness` with the real files given as text (path in the module -> content), for a
    peer whose pinned source is not in a local clone."""
    with tempfile.TemporaryDirectory(prefix="peer-record-") as tmp:
        root = Path(tmp) / "module"
        shutil.copytree(harness, root)
        for rel, text in texts.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        lines = [f"module {module}", "", "go 1.19", ""]
        # a module path ending in /vN needs a vN version, even for a replaced stub
        lines += [f"require {m} {_stub_version(m)}" for m in stubs]
        lines += [f"replace {m} => {path}" for m, path in stubs.items()]
        (root / "go.mod").write_text("\n".join(lines) + "\n")
        env = {
            **os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=mod", "GOWORK": "off", "GOTOOLCHAIN": "local",
            "GOCACHE": str(Path(tmp) / "cache"), "GOPATH": str(Path(tmp) / "gopath"),
        }  # fmt: skip
        run = subprocess.run(
            ["go", "run", "./cmd/record"], cwd=root, env=env, input=stdin, capture_output=True, text=True
        )
        if run.returncode != 0:
            raise SystemExit(f"go run failed:\n{run.stderr}")
        return run.stdout


def _stub_version(module: str) -> str:
    major = module.rsplit("/", 1)[-1]
    return f"{major}.0.0" if major[:1] == "v" and major[1:].isdigit() else "v0.0.0"


def go_version() -> str:
    return subprocess.run(["go", "version"], capture_output=True, text=True, check=True).stdout.strip()
