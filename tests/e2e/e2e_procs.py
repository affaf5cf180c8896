"""Processes of the end-to-end tests: ``llmscale emulate``, ``run`` and ``loadgen`` as a user starts them.

Every process runs in its own process group (``start_new_session``) with its output in files
of the test's work directory, so a chatty child never blocks on a full pipe and a failure
message can show its log. :meth:`Proc.stop` sends SIGTERM to the group, waits, then SIGKILLs
it: nothing a test started outlives it, whether the test passed or failed.

Waiting is always for a condition with a deadline (:func:`support.wait.wait_for`), never a fixed sleep:
the machine is shared and its load varies.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from support.wait import wait_for

__all__ = [
    "ADMIN_TOKEN",
    "EmulateProcess",
    "Proc",
    "decision_lines",
    "llmscale_command",
    "metric_value",
    "mooncake_slice",
    "write_config",
]

T = TypeVar("T")

#: emulate's admin token in these tests. Every process gets it in its environment, as a user
#: would export it: emulate (--admin-api) and ``llmscale run`` (its actuator and target discovery)
#: read it from $LLMSCALE_EMULATE_ADMIN_TOKEN; Prometheus's http_sd is given it in its config.
ADMIN_TOKEN = "e2e-emulate-admin-token-7d41"


def llmscale_command() -> list[str]:
    """The ``llmscale`` console script next to this interpreter (the venv's), else ``python -m``."""
    script = Path(sys.executable).with_name("llmscale")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "llmscale.cli"]


class Proc:
    """One child process in its own group, stdout and stderr to ``<workdir>/<name>.{out,err}``."""

    def __init__(self, name: str, argv: Sequence[str], workdir: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                # Unbuffered: the test reads what the child printed while it runs.
                env={**os.environ, "PYTHONUNBUFFERED": "1", "LLMSCALE_EMULATE_ADMIN_TOKEN": ADMIN_TOKEN},
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def tail(self, n: int = 25) -> str:
        lines = (self.stdout() + self.stderr()).splitlines()
        return f"--- {self.name} (exit {self.proc.poll()}), last {n} lines:\n" + "\n".join(lines[-n:])

    def wait(self, timeout_s: float) -> int:
        """Wait for a bounded run to end by itself; kill it and fail the test if it does not."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"{self.name} did not exit within {timeout_s:.0f} s\n{self.tail()}")

    def signal(self, sig: int) -> None:
        """Signal the child's process group, only while the child is not reaped: once it is,
        its id may belong to someone else."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the group, wait, SIGKILL it if still there; the exit code (None if never reaped)."""
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout_s)
        return self.proc.poll()


class EmulateProcess(Proc):
    """``llmscale emulate`` with its admin API on; :meth:`wait_ready` reads the front door from its output.

    ``port`` 0 lets the OS pick every port; a given front-door port (a test that must point
    Prometheus at it before emulate starts) puts the replicas on free ports above it.
    """

    def __init__(self, workdir: Path, *args: str, name: str = "emulate", port: int = 0) -> None:
        argv = [*llmscale_command(), "emulate", "--port", str(port), "--admin-api", *args]
        super().__init__(name, argv, workdir)
        self.base_url = ""

    def wait_ready(self, timeout_s: float = 60.0) -> str:
        def ready() -> str | None:
            if not self.running():
                pytest.fail(f"emulate exited at start-up\n{self.tail()}")
            text = self.stdout()
            m = re.search(r"^front door: (http://\S+)", text, re.M)
            return m.group(1) if m and re.search(r"^ready$", text, re.M) else None

        self.base_url = wait_for("emulate ready", ready, timeout_s, every_s=0.2, context=self.tail)
        return self.base_url

    def admin(self) -> dict[str, Any]:
        """``GET /admin/replicas``: spec_replicas and every replica with phase and port."""
        resp = httpx.get(
            self.base_url + "/admin/replicas",
            timeout=10.0,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        resp.raise_for_status()
        doc: dict[str, Any] = resp.json()
        return doc

    def ready_replicas(self) -> list[dict[str, Any]]:
        return [r for r in self.admin()["replicas"] if r["phase"] == "ready"]


def write_config(workdir: Path, doc: Mapping[str, Any], name: str = "llmscale.yaml") -> Path:
    path = workdir / name
    path.write_text(yaml.safe_dump(dict(doc), sort_keys=False))
    return path


def decision_lines(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of a decision log (a line being written is skipped)."""
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            lines.append(json.loads(raw))
    return lines


def metric_value(base_url: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """The value of one sample of a Prometheus text page (None when absent or unreachable)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = httpx.get(base_url + "/metrics", timeout=5.0).text
    except httpx.HTTPError:
        return None
    want = dict(labels or {})
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in want.items()):
                return float(s.value)
    return None


def mooncake_slice(shared_data: Path, dest: Path, *, span_s: float, max_total_tokens: int) -> int:
    """The first ``span_s`` seconds of the Mooncake synthetic trace, in its own JSONL format, keeping
    the requests that fit the emulated model's context (prompt + output <= ``max_total_tokens``).

    Llama-3-8B serves 8,192 tokens; 47% of Mooncake's requests (mean prompt 15k tokens) are longer
    and would only come back as HTTP 400. ``hash_ids`` are dropped: the emulator has no prefix
    cache. Returns the number of requests kept.
    """
    src = shared_data / "traces" / "mooncake_synthetic_trace.jsonl"
    if not src.exists():
        pytest.skip(f"{src} not found: the Mooncake trace is not in ../shared/data")
    kept = 0
    with open(src) as f, open(dest, "w") as out:
        for line in f:
            row = json.loads(line)
            if row["timestamp"] > span_s * 1000.0:
                break
            if row["input_length"] + row["output_length"] <= max_total_tokens:
                row.pop("hash_ids", None)
                out.write(json.dumps(row) + "\n")
                kept += 1
    return kept


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
